// Arguments the kernel cannot read (hooks/user_memory.h): each call gets
// what libc's gets, EFAULT (or EINVAL for a malformed control header),
// in a fiber and on a plain thread alike, where the hooks used to read
// the argument first and die of SIGSEGV (sendmsg and sendmmsg on every
// thread, with WEFT_HOOKS=0 too; writev, readv of a socket and the sleeps
// in a fiber). Each case also runs on memory that is readable but off the
// stack, which the hooks ask the kernel about.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "hooks_test_support.h"

namespace weft {
namespace {

using test::outcome;

// Two pages: the first readable and writable, the second with no access.
struct Pages {
  long size = ::sysconf(_SC_PAGESIZE);
  char* base =
      static_cast<char*>(::mmap(nullptr, 2 * size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  Pages() {
    EXPECT_NE(base, MAP_FAILED);
    EXPECT_EQ(::mprotect(base + size, size, PROT_NONE), 0);
  }
  ~Pages() { ::munmap(base, 2 * size); }
  char* readable() const { return base; }
  char* unreadable() const { return base + size; }
};

struct SocketPair {
  int fds[2] = {-1, -1};
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0); }
  ~SocketPair() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
};

TEST(HooksUserMemory, VectorCallsOfAnUnreadableArrayFailWithEfault) {
  const Pages pages;
  const SocketPair sockets;
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  auto* bad = reinterpret_cast<iovec*>(pages.unreadable());
  auto body = [&] {
    errno = 0;
    std::string out = "writev socket " + outcome(::writev(sockets.fds[0], bad, 1));
    out += "\nwritev pipe " + outcome(::writev(pipe_fds[1], bad, 1));
    // A byte to read, so that a read that got past the array would return.
    EXPECT_EQ(::write(sockets.fds[1], "x", 1), 1);
    out += "\nreadv socket " + outcome(::readv(sockets.fds[0], bad, 1));
    char byte;
    EXPECT_EQ(::read(sockets.fds[0], &byte, 1), 1);
    // An eventfd: the hooks look at the array's size for its 8-byte rule
    // only where the kernel could read it.
    const int event = ::eventfd(1, EFD_CLOEXEC);
    out += "\nreadv eventfd " + outcome(::readv(event, bad, 1));
    out += "\nwritev eventfd " + outcome(::writev(event, bad, 1));
    ::close(event);
    // Readable, off the stack.
    auto* good = reinterpret_cast<iovec*>(pages.readable());
    static char text[] = "ab";
    good[0] = {text, 1};
    good[1] = {text + 1, 1};
    out += "\nwritev socket off the stack " + outcome(::writev(sockets.fds[0], good, 2));
    char two[2] = {};
    const long got = ::read(sockets.fds[1], two, 2);
    out += " read " + outcome(got) + " " + std::string(two, 2);
    return out;
  };
  const test::ThreadAndFiber got = test::on_thread_and_fiber(body);
  EXPECT_EQ(got.thread,
            "writev socket -1 EFAULT\nwritev pipe -1 EFAULT\nreadv socket -1 EFAULT\nreadv eventfd -1 EFAULT\n"
            "writev eventfd -1 EFAULT\nwritev socket off the stack 2 read 2 ab");
  EXPECT_EQ(got.fiber, got.thread);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

// sendmsg and sendmmsg read the fds a message carries before the kernel
// does (hooks/description_sharing.h); a message or control header they
// cannot read, or a header the kernel would refuse, is the kernel's to
// answer.
TEST(HooksUserMemory, SendsOfUnreadableOrMalformedMessagesGiveTheKernelsError) {
  const Pages pages;
  const SocketPair sockets;
  auto body = [&] {
    errno = 0;
    std::string out = "sendmsg " + outcome(::sendmsg(sockets.fds[0], reinterpret_cast<msghdr*>(pages.unreadable()), 0));
    out += "\nsendmmsg " + outcome(::sendmmsg(sockets.fds[0], reinterpret_cast<mmsghdr*>(pages.unreadable()), 1, 0));
    char byte = 'x';
    iovec one{&byte, 1};
    msghdr msg{};
    msg.msg_iov = &one;
    msg.msg_iovlen = 1;
    msg.msg_control = pages.unreadable();
    msg.msg_controllen = CMSG_SPACE(sizeof(int));
    out += "\ncontrol unreadable " + outcome(::sendmsg(sockets.fds[0], &msg, 0));
    // A control buffer that runs from the readable page into the other:
    // its SCM_RIGHTS header is readable, its fds are not.
    auto* header = reinterpret_cast<cmsghdr*>(pages.unreadable() - sizeof(cmsghdr));
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    msg.msg_control = header;
    out += "\nfds unreadable " + outcome(::sendmsg(sockets.fds[0], &msg, 0));
    // A header shorter than itself, and one longer than the buffer.
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    auto* bad = reinterpret_cast<cmsghdr*>(control);
    bad->cmsg_level = SOL_SOCKET;
    bad->cmsg_type = SCM_RIGHTS;
    bad->cmsg_len = 0;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    out += "\nheader too short " + outcome(::sendmsg(sockets.fds[0], &msg, 0));
    bad->cmsg_len = 1 << 20;
    out += "\nheader too long " + outcome(::sendmsg(sockets.fds[0], &msg, 0));
    // The messages off the stack, readable: sent.
    auto* heap_msg = reinterpret_cast<mmsghdr*>(pages.readable());
    *heap_msg = {};
    heap_msg->msg_hdr.msg_iov = &one;
    heap_msg->msg_hdr.msg_iovlen = 1;
    out += "\nsendmmsg off the stack " + outcome(::sendmmsg(sockets.fds[0], heap_msg, 1, 0));
    out += "\nsendmsg off the stack " + outcome(::sendmsg(sockets.fds[0], &heap_msg->msg_hdr, 0));
    char two[2];
    out += " read " + outcome(::read(sockets.fds[1], two, 2));
    return out;
  };
  const test::ThreadAndFiber got = test::on_thread_and_fiber(body);
  EXPECT_EQ(got.thread,
            "sendmsg -1 EFAULT\nsendmmsg -1 EFAULT\ncontrol unreadable -1 EFAULT\nfds unreadable -1 EFAULT\n"
            "header too short -1 EINVAL\nheader too long -1 EINVAL\nsendmmsg off the stack 1\n"
            "sendmsg off the stack 1 read 2");
  EXPECT_EQ(got.fiber, got.thread);
}

TEST(HooksUserMemory, SleepsOfAnUnreadableRequestFailWithEfault) {
  const Pages pages;
  auto body = [&] {
    auto* bad = reinterpret_cast<const timespec*>(pages.unreadable());
    errno = 0;
    std::string out = "nanosleep " + outcome(::nanosleep(bad, nullptr));
    out += "\nclock_nanosleep " + std::to_string(::clock_nanosleep(CLOCK_MONOTONIC, 0, bad, nullptr));
    out += "\nthrd_sleep " + std::to_string(::thrd_sleep(bad, nullptr));
    // Readable, off the stack: a sleep.
    auto* good = reinterpret_cast<timespec*>(pages.readable());
    *good = {0, 1'000'000};
    out += "\nnanosleep off the stack " + outcome(::nanosleep(good, nullptr));
    return out;
  };
  const test::ThreadAndFiber got = test::on_thread_and_fiber(body);
  EXPECT_EQ(got.thread, "nanosleep -1 EFAULT\nclock_nanosleep 14\nthrd_sleep -2\nnanosleep off the stack 0");
  EXPECT_EQ(got.fiber, got.thread);
}

// ioctl(FIONBIO) reads its int to keep the user's view of O_NONBLOCK;
// waitid's siginfo is the kernel's to write, also "nothing yet" (si_pid
// 0 with WNOHANG). Before, both died of SIGSEGV (ioctl on every thread).
TEST(HooksUserMemory, IoctlAndWaitidOfMemoryTheKernelRefusesFailWithEfault) {
  const Pages pages;
  const SocketPair sockets;
  auto body = [&] {
    errno = 0;
    std::string out = "ioctl FIONBIO " + outcome(::ioctl(sockets.fds[0], FIONBIO, pages.unreadable()));
    const pid_t child = ::fork();
    if (child == 0) ::_exit(3);
    siginfo_t exited{};
    EXPECT_EQ(::waitid(P_PID, id_t(child), &exited, WEXITED | WNOWAIT), 0);  // a zombie now
    const long waited = ::waitid(P_PID, id_t(child), reinterpret_cast<siginfo_t*>(pages.unreadable()), WEXITED);
    out += "\nwaitid " + outcome(waited);
    const long reaped = ::waitpid(child, nullptr, 0);
    out += "\nthen waitpid " + outcome(reaped);
    return out;
  };
  const test::ThreadAndFiber got = test::on_thread_and_fiber(body);
  EXPECT_EQ(got.thread, "ioctl FIONBIO -1 EFAULT\nwaitid -1 EFAULT\nthen waitpid -1 ECHILD");
  EXPECT_EQ(got.fiber, got.thread);
}

}  // namespace
}  // namespace weft
