// A seccomp filter that refuses some system calls with an errno, as a
// container's profile does: for the tests that run in a child process of
// their own (test::run_child, test::child_mode in pool_support.h) to see
// weft without those calls.
#pragma once

#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace weft::test {

// Makes each system call of `numbers` (__NR_..., 1 to 255 of them) fail
// with `error` from now on, the others untouched, in the calling thread
// and in the threads and processes it starts after (no TSYNC: threads
// already running keep their calls), for good: no filter comes off. Call
// it only in a child process started for the test (test::child_mode),
// never in a test process that goes on to run other tests.
// Use: ASSERT_TRUE(test::refuse_syscalls({__NR_io_uring_setup}, ENOSYS)).
inline ::testing::AssertionResult refuse_syscalls(std::initializer_list<long> numbers, int error) {
  if (numbers.size() == 0 || numbers.size() > 255)
    return ::testing::AssertionFailure() << numbers.size() << " calls to refuse: 1 to 255 fit the filter";
  // Loads the call's number, then one comparison a call: a match jumps
  // to the refusal, the last mismatch over it to the allowance.
  std::vector<sock_filter> filter;
  filter.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  const std::size_t count = numbers.size();
  std::size_t index = 0;
  for (const long number : numbers) {
    const auto to_refusal = static_cast<std::uint8_t>(count - 1 - index);
    const std::uint8_t to_allowance = index + 1 == count ? 1 : 0;
    filter.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(number), to_refusal, to_allowance));
    ++index;
  }
  filter.push_back(
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<std::uint32_t>(error) & SECCOMP_RET_DATA)));
  filter.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  const sock_fprog program{static_cast<unsigned short>(filter.size()), filter.data()};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return ::testing::AssertionFailure() << "prctl(PR_SET_NO_NEW_PRIVS): " << strerrorname_np(errno);
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0)
    return ::testing::AssertionFailure() << "prctl(PR_SET_SECCOMP): " << strerrorname_np(errno);
  return ::testing::AssertionSuccess();
}

}  // namespace weft::test
