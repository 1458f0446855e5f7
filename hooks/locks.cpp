// What the lock hooks share (hooks/locks.h): who calls, whether it may
// park, deadlines, futexes, and waiting in the parking lot.
#include "locks.h"

#include <dlfcn.h>
#include <link.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "../runtime/system_calls.h"
#include "../sched/current.h"
#include "tsan.h"

namespace weft::detail::locks {
namespace {

void forget_tid_in_child() noexcept { cached_tid = 0; }

// --- libweft's own code ----------------------------------------------------
// The executable segment of libweft, found once at load: a call that
// returns into it is libweft's own (its std::mutexes, bound to these
// hooks by -Bsymbolic-functions), and never parks. Until it is known
// (a lock taken by a constructor that runs before libweft's), every call
// counts as libweft's: blocking a thread is always safe.
std::atomic<std::uintptr_t> own_text_begin{0};
std::atomic<std::uintptr_t> own_text_end{0};

int find_own_text(dl_phdr_info* info, std::size_t, void* marker) {
  const auto address = reinterpret_cast<std::uintptr_t>(marker);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    if (segment.p_type != PT_LOAD || (segment.p_flags & PF_X) == 0) continue;
    const std::uintptr_t begin = info->dlpi_addr + segment.p_vaddr;
    const std::uintptr_t end = begin + segment.p_memsz;
    if (address < begin || address >= end) continue;
    own_text_end.store(end, std::memory_order_relaxed);
    own_text_begin.store(begin, std::memory_order_release);
    return 1;
  }
  return 0;
}

[[gnu::constructor]] void at_load() {
  pthread_atfork(nullptr, nullptr, &forget_tid_in_child);
  dl_iterate_phdr(&find_own_text, reinterpret_cast<void*>(&find_own_text));
}

}  // namespace

#ifdef WEFT_HOOKS_TSAN
bool real_calls_reach_tsan() noexcept {
  // 0: not known yet, 1: they do, 2: they do not. Racing first callers
  // find the same answer.
  static std::atomic<int> known{0};
  int answer = known.load(std::memory_order_relaxed);
  if (answer == 0) {
    Dl_info info{};
    const bool tsan = dladdr(reinterpret_cast<void*>(real::pthread_mutex_lock()), &info) != 0 &&
                      info.dli_fname != nullptr && std::strstr(info.dli_fname, "tsan") != nullptr;
    answer = tsan ? 1 : 2;
    known.store(answer, std::memory_order_relaxed);
  }
  return answer == 1;
}
#endif

bool called_from_weft(const void* return_address) noexcept {
  const std::uintptr_t begin = own_text_begin.load(std::memory_order_acquire);
  if (begin == 0) return true;
  const auto address = reinterpret_cast<std::uintptr_t>(return_address);
  return address >= begin && address < own_text_end.load(std::memory_order_relaxed);
}

namespace {

#ifdef WEFT_HOOKS_TSAN
// A plain thread's TSan fiber for WaitingCall, made at its first wait and
// destroyed with the thread.
struct ThreadTsanFiber {
  void* fiber = nullptr;
  ~ThreadTsanFiber() {
    if (fiber != nullptr) __tsan_destroy_fiber(fiber);
  }
};
thread_local ThreadTsanFiber thread_tsan;

void* thread_tsan_fiber() noexcept {
  if (thread_tsan.fiber == nullptr) thread_tsan.fiber = __tsan_create_fiber(0);
  return thread_tsan.fiber;
}
#endif

std::int64_t to_ns(const timespec& ts) noexcept {
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

[[gnu::tls_model("initial-exec"), gnu::visibility("hidden")]] constinit thread_local int cached_tid = 0;

int fetch_tid() noexcept {
  cached_tid = static_cast<int>(::syscall(SYS_gettid));
  return cached_tid;
}

Waits how_call_waits(const void* return_address) noexcept {
  if (called_from_weft(return_address)) return Waits::block_weft;
  // A signal handler's call is libc's (docs/io.md, "Signal handlers"): it
  // blocks its thread, and touches none of the fiber's state (its pins),
  // which the interrupted code may be changing.
  if (in_signal_handler()) return Waits::block_thread;
  FiberControl* fiber = current_fiber();
  if (fiber == nullptr) return Waits::block_thread;
  if (in_vfork_child()) return Waits::block_thread;  // its worker is the parent's
  if (fiber->pin_count.load(std::memory_order_relaxed) != 0) return Waits::block_fiber;
  // A caller in an object listed for its locks (WEFT_HOOKS_EXCLUDE,
  // WEFT_HOOK_LOCKS_EXCLUDE) waits as a thread would: it may keep state of
  // its thread's half-changed across the lock (OpenSSL's per-thread random
  // generators), which another fiber of the thread would meet.
  return lock_caller_excluded(return_address) ? Waits::block_fiber : Waits::park;
}

void lock_checkpoint_slow(const void* return_address) noexcept {
  if (how_call_waits(return_address) == Waits::park) CheckpointOnReturn::hook_checkpoint_slow();
}

WEFT_TSAN_SWITCHES WaitingCall::WaitingCall(Waits waits) noexcept : waits_(waits) {
  switch (waits) {
    case Waits::park:
    case Waits::block_fiber:
      home_.emplace();
      saved_errno_ = errno_value();
      pin_.emplace();
      break;
    case Waits::block_thread:
#ifdef WEFT_HOOKS_TSAN
      own_tsan_fiber_ = __tsan_get_current_fiber();
      __tsan_switch_to_fiber(thread_tsan_fiber(), 0);
#endif
      break;
    case Waits::block_weft:
      break;
  }
}

WEFT_TSAN_SWITCHES WaitingCall::~WaitingCall() {
  if (pin_.has_value()) {
    pin_.reset();
    set_errno(saved_errno_);
  }
#ifdef WEFT_HOOKS_TSAN
  if (own_tsan_fiber_ != nullptr) __tsan_switch_to_fiber(own_tsan_fiber_, 0);
#endif
}

// --- deadlines -------------------------------------------------------------

int Deadline::check() const noexcept {
  if (none()) return 0;
  return at->tv_nsec < 0 || at->tv_nsec >= 1'000'000'000 ? EINVAL : 0;
}

bool Deadline::passed() const noexcept {
  if (none()) return false;
  if (at->tv_sec < 0) return true;
  timespec now{};
  clock_gettime(clock, &now);
  return to_ns(now) >= to_ns(*at);
}

Clock::time_point Deadline::steady() const noexcept {
  if (none()) return no_deadline;
  if (at->tv_sec < 0) return Clock::now();
  if (clock == CLOCK_MONOTONIC) {
    // steady_clock is CLOCK_MONOTONIC: the same time, converted exactly,
    // but for a time past what it counts (2^63 ns, 292 years), which the
    // futex of a blocked thread waits for as for none.
    constexpr auto kLastSecond = std::chrono::duration_cast<std::chrono::seconds>(Clock::duration::max()).count();
    if (at->tv_sec >= kLastSecond) return no_deadline;
    return Clock::time_point(std::chrono::seconds(at->tv_sec) + std::chrono::nanoseconds(at->tv_nsec));
  }
  timespec now{};
  clock_gettime(clock, &now);
  const long double left_ns = static_cast<long double>(at->tv_sec - now.tv_sec) * 1e9L + (at->tv_nsec - now.tv_nsec);
  return saturating_deadline(Clock::now(), WideNanos(left_ns));
}

// --- futexes -----------------------------------------------------------------

int futex_wait(void* word, unsigned expected, const Deadline& deadline) noexcept {
  int op = FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG;
  const timespec* timeout = nullptr;
  if (!deadline.none()) {
    // The kernel refuses a negative time; glibc calls that one passed.
    if (deadline.at->tv_sec < 0) return ETIMEDOUT;
    if (deadline.clock == CLOCK_REALTIME) op |= FUTEX_CLOCK_REALTIME;
    timeout = deadline.at;
  }
  const long result = sys::futex(word, op, expected, timeout, FUTEX_BITSET_MATCH_ANY);
  return result < 0 ? static_cast<int>(-result) : 0;
}

int futex_wake(void* word, int count) noexcept {
  const long woken = sys::futex(word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, static_cast<std::uint32_t>(count), nullptr, 0);
  return woken > 0 ? static_cast<int>(woken) : 0;
}

// --- the parking lot --------------------------------------------------------

bool wait_in_lot(LotBucket& bucket, LotWaiter& waiter, const WaitSite& site, const Deadline& deadline, bool park,
                 ParkAction after_release, const std::atomic<bool>* cancelled) noexcept {
  if (park) return park_then(waiter, &bucket.lock, site, deadline.steady(), after_release) == WakeReason::notified;
  // A thread, or a fiber that may not park, sleeps on its waiter's futex
  // as park() has a thread do (unpark() wakes that futex), but with the
  // caller's own clock, as glibc's futex waits.
  waiter.fiber = nullptr;
  waiter.may_time_out = !deadline.none();
  bucket.lock.unlock();
  if (after_release.run != nullptr) after_release.run(after_release.arg);
  // Ends the wait unless a wake-up came first (then it is taken).
  const auto give_up = [&waiter] {
    std::uint32_t expected = Waiter::waiting;
    return waiter.state.compare_exchange_strong(expected, Waiter::timed_out, std::memory_order_acq_rel);
  };
  for (;;) {
    const std::uint32_t state = waiter.state.load(std::memory_order_acquire);
    if (state != Waiter::waiting) return state == Waiter::notified;
    if (cancelled != nullptr && cancelled->load(std::memory_order_acquire)) {
      if (give_up()) return false;
      continue;  // notified meanwhile: the wake is taken, the cancellation acts later
    }
    if (futex_wait(&waiter.state, Waiter::waiting, deadline) == ETIMEDOUT && give_up()) return false;
  }
}

}  // namespace weft::detail::locks
