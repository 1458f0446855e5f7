// Futex waits made through syscall(2), and pthread_once's, in a fiber: the
// fiber parks and a helper thread of the blocking pool waits in the kernel
// for it.
//
// Who waits so: libstdc++'s __cxa_guard_acquire, while another fiber runs
// the initializer of a function-local static (`static Client c = connect();`),
// and C++20's atomic waits, compiled into the caller from the headers:
// std::atomic<T>::wait, std::latch, std::barrier, std::counting_semaphore.
// Each calls syscall(SYS_futex, FUTEX_WAIT...) through libc's syscall(),
// which the hooks interpose. Before, each such wait held its worker's
// thread in the kernel: sysmon handed the worker's other fibers to a new
// spare thread after a tick, and the next waiter blocked that one; 100
// fibers behind one static's 5 ms initializer took 100 ms, a spare for
// each (docs/benchmarks.md, "Futex waits through syscall()").
//
// The wait itself is the kernel's, on the helper: the same word, value,
// timeout and bitset, woken by any waker, in this process or another, so
// its result is the call's own. Kept as on a thread:
// - First a probe on the caller's thread, which waits for nothing
//   (futex_compare): a word that no longer holds the value (EAGAIN), a bad
//   or misaligned address (EFAULT, EINVAL), returns at once with the
//   call's own error, no helper. (A FUTEX_WAIT with a zero timeout slept
//   the thread's timer slack, 50 us, first.) Before that, a call the
//   kernel refuses before it compares the word is made as it is: it fails
//   at once with the kernel's own error.
// - errno, and the thread: the fiber resumes on the thread it called from
//   (hooks/offload.h).
// What differs: a relative timeout counts from when the helper starts the
// wait, tens of microseconds later; a signal does not interrupt a parked
// fiber's wait (no EINTR), as for every parked hook.
//
// Never queued behind other calls: a wait runs only if a helper is free at
// once, and such waits hold at most half the pool
// (BlockingPool::run_wait_if_free); else the call blocks its thread as
// before. Queued, a waiter could hold the helper that the initializer's own
// getaddrinfo needs to end the wait.
//
// pthread_once (and so std::call_once) waits inside libc, out of a hook's
// reach: its hook waits itself while another caller runs the routine
// (below). Not the other futex waits inside libc (glibc's own locks: the
// lock hooks, docs/locks.md), nor libweft's own: its layers make their
// calls with the instruction (weft/detail/raw_syscall.h), and a call from
// libweft's code that does reach syscall() passes through (in_weft_code).
#include <dlfcn.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <threads.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <ctime>
#include <mutex>

#include "../sched/futex.h"
#include "excluded_callers.h"
#include "hook_support.h"
#include "offload.h"
#include "real_calls.h"
#include "user_memory.h"

namespace weft::detail {
namespace {

bool is_futex_wait(long op) noexcept {
  const long command = op & FUTEX_CMD_MASK;
  return command == FUTEX_WAIT || command == FUTEX_WAIT_BITSET;
}

// Whether the kernel refuses the futex wait of `args` before it compares
// the word, in its order (kernel/futex/syscalls.c, do_futex, futex_wait): a
// timeout it cannot read (EFAULT) or that is no time (EINVAL),
// FUTEX_CLOCK_REALTIME on a FUTEX_WAIT (ENOSYS), a FUTEX_WAIT_BITSET with
// an empty bitset (EINVAL).
bool refused_before_the_word(const long (&args)[6]) noexcept {
  const auto* timeout = reinterpret_cast<const timespec*>(args[3]);
  if (timeout != nullptr && !(readable_by_kernel(timeout) && valid_timespec(timeout))) return true;
  if ((args[1] & FUTEX_CMD_MASK) == FUTEX_WAIT) return (args[1] & FUTEX_CLOCK_REALTIME) != 0;
  return static_cast<std::uint32_t>(args[5]) == 0;  // the kernel's bitset is a u32
}

// The futex wait of `args` (syscall's, after SYS_futex), parked.
long futex_wait_parked(const long (&args)[6]) noexcept {
  const auto real_syscall = real::syscall();
  if (refused_before_the_word(args))  // fails at once: no comparison, no helper
    return real_syscall(SYS_futex, args[0], args[1], args[2], args[3], args[4], args[5]);
  const long compared = futex_compare(reinterpret_cast<const void*>(args[0]), static_cast<std::uint32_t>(args[2]),
                                      (args[1] & FUTEX_PRIVATE_FLAG) == 0);
  if (compared == -EAGAIN || compared == -EFAULT || compared == -EINVAL) {
    set_errno(int(-compared));  // the call's own answer: the word moved, a bad or misaligned address
    return -1;
  }
  if (compared != 0)  // the comparison itself refused (a seccomp profile): the call as it is
    return real_syscall(SYS_futex, args[0], args[1], args[2], args[3], args[4], args[5]);
  if (BlockingPool* pool = BlockingPool::find(*current_fiber()->scheduler)) {
    auto wait = [&] { return real_syscall(SYS_futex, args[0], args[1], args[2], args[3], args[4], args[5]); };
    if (const auto result =
            offloaded_if_helper_free(*pool, wait, {"futex", reinterpret_cast<const void*>(args[0]), "wait"}))
      return *result;
  }
  return real_syscall(SYS_futex, args[0], args[1], args[2], args[3], args[4], args[5]);
}

// std::call_once's callable, as libstdc++ keeps it for __once_proxy in
// thread_locals (<mutex>). Out of line, so that each asks for the running
// thread's afresh: compiled code keeps a thread_local's address across a
// call, and a fiber released from its worker may resume on another.
struct CallOnceState {
  void* callable = nullptr;
  void (*call)() = nullptr;
  [[gnu::noinline]] static CallOnceState of_this_thread() noexcept { return {std::__once_callable, std::__once_call}; }
  [[gnu::noinline]] void restore_on_this_thread() const noexcept {
    std::__once_callable = callable;
    std::__once_call = call;
  }
};

// glibc's pthread_once word (nptl/pthread_once.c): these two bits, and
// above them the fork generation of the caller that set INPROGRESS.
constexpr int kOnceInProgress = 1;
constexpr int kOnceDone = 2;

// pthread_once in a fiber. Done: nothing to wait for. Not started: glibc's
// call, which runs the routine here (or, if another caller started it
// meanwhile, waits in the kernel, as before). Started by another: a parked
// wait until the word changes (glibc wakes its waiters when the routine
// returns, or when it is cancelled or throws and the word goes back to
// 0), then look again. A forked child's word, whose INPROGRESS may be
// left from the parent, is glibc's to judge: parking_enabled() is false
// there.
//
// std::call_once (libstdc++) hands its callable to pthread_once through two
// thread_locals, std::__once_callable and std::__once_call, set just before
// the call and cleared when its own call_once ends, which __once_proxy, the
// routine, reads. While this fiber is parked, the other fibers of its thread
// set and clear them with their own call_once: when the first caller's
// callable threw and the word went back to 0, glibc ran __once_proxy with
// another fiber's callable, or with none (SIGSEGV at address 0). This
// caller's pair is kept at entry and put back before glibc's call.
int once_parked(pthread_once_t* once, void (*init_routine)()) {
  const CallOnceState own = init_routine == &std::__once_proxy ? CallOnceState::of_this_thread() : CallOnceState{};
  for (;;) {
    const int word = __atomic_load_n(once, __ATOMIC_ACQUIRE);
    if ((word & kOnceDone) != 0) return 0;
    if ((word & kOnceInProgress) == 0) {
      if (init_routine == &std::__once_proxy) own.restore_on_this_thread();
      return real::pthread_once()(once, init_routine);
    }
    const int saved = errno_value();
    const long args[6] = {reinterpret_cast<long>(once), FUTEX_WAIT_PRIVATE, word, 0, 0, 0};
    futex_wait_parked(args);
    set_errno(saved);
  }
}

// Under ThreadSanitizer the futex hook passes every call through: its
// runtime implements the guard and once waits itself (docs/io.md), and a
// parked wait beside them hung a std::ifstream's locale set-up
// (stack_test). Asked of the process, not of how libweft was built
// (WEFT_HOOKS_TSAN): a libweft built without TSan may be loaded into a
// program built with it. (Atomics, not function-local statics, here: a
// static's guard waits through syscall(), this very hook.)
bool under_tsan() noexcept {
  static std::atomic<int> known{-1};
  int tsan = known.load(std::memory_order_relaxed);
  if (tsan < 0) {
    tsan = dlsym(RTLD_DEFAULT, "__tsan_init") != nullptr ? 1 : 0;
    known.store(tsan, std::memory_order_relaxed);
  }
  return tsan == 1;
}

using OnceCall = int(pthread_once_t*, void (*)());

// The pthread_once that the process's callers reach first when it is not
// libweft's (a sanitizer's interceptor), else null.
OnceCall* pthread_once_before_weft() noexcept {
  static std::atomic<void*> first{nullptr};
  static std::atomic<bool> looked{false};
  if (!looked.load(std::memory_order_acquire)) {
    void* found = dlsym(RTLD_DEFAULT, "pthread_once");
    first.store(found == reinterpret_cast<void*>(&::pthread_once) ? nullptr : found, std::memory_order_relaxed);
    looked.store(true, std::memory_order_release);
  }
  return reinterpret_cast<OnceCall*>(first.load(std::memory_order_relaxed));
}

}  // namespace
}  // namespace weft::detail

using namespace weft::detail;

extern "C" {
#pragma GCC visibility push(default)

// glibc's syscall() reads six arguments whatever the call: so does this.
// The sixth is on the caller's stack, in words the caller may not have
// written (a call with fewer arguments): AddressSanitizer must not check
// those reads, which it reported as a stack-buffer-underflow where the
// caller's lowest stack word was a redzone.
[[gnu::no_sanitize_address]] long syscall(long number, ...) noexcept {
  va_list list;
  va_start(list, number);
  long args[6];
  for (long& arg : args) arg = va_arg(list, long);
  va_end(list);
  if (number == SYS_futex && is_futex_wait(args[1]) && parking_enabled() &&
      !in_weft_code(__builtin_return_address(0)) && !under_tsan())
    return futex_wait_parked(args);
  return real::syscall()(number, args[0], args[1], args[2], args[3], args[4], args[5]);
}

int pthread_once(pthread_once_t* once, void (*init_routine)()) {
  // A sanitizer that defines pthread_once ahead of libweft (TSan) keeps
  // its own encoding of the word (its "done" is glibc's "in progress"):
  // every call, libweft's own included, must be its. Under TSan the hook
  // passes every call through in any case: its interceptor is not always
  // found first (tests/stack_test under TSan hung with only the lookup).
  if (auto* interposer = pthread_once_before_weft()) return interposer(once, init_routine);
  if (!parking_enabled() || under_tsan()) return real::pthread_once()(once, init_routine);
  return once_parked(once, init_routine);
}

// C11's once flag is glibc's pthread_once word, which glibc's call_once
// runs through its internal pthread_once (glibc's, whatever a sanitizer
// interposes), where no hook sees it: a fiber's wait for a routine another
// fiber runs blocked its worker.
void call_once(once_flag* flag, void (*routine)()) {
  auto* once = reinterpret_cast<pthread_once_t*>(flag);
  if (!parking_enabled() || under_tsan())
    real::pthread_once()(once, routine);
  else
    once_parked(once, routine);
}

#pragma GCC visibility pop
}
