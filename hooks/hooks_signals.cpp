// The calls that install a signal handler, interposed so that every handler
// runs inside a trampoline of weft's, which counts it in the thread's
// signal_handler_depth while it runs (hooks/signal_handlers.h): a hooked
// call made there then behaves as libc's (no park, no checkpoint yield, no
// lock the interrupted code may hold).
//
// What the kernel holds is the user's action with the handler replaced by
// a trampoline of the same form: trampoline_plain for a handler without
// SA_SIGINFO, trampoline_siginfo for one with it. The mask and every
// flag (SA_RESTART, SA_RESETHAND, SA_NODEFER, SA_ONSTACK...) are the
// user's, so the kernel delivers exactly as it would have, on the same
// stack; each trampoline calls the handler recorded for its form and
// signal. So what sigaction reports back is the kernel's action with a
// trampoline translated back into the user's handler: exact also for an
// action changed behind weft's back (SA_RESETHAND's reset to SIG_DFL,
// siginterrupt's SA_RESTART, a raw rt_sigaction, libc's internal
// save-and-restore in system()).
//
// The legacy calls (signal, bsd_signal, ssignal, sysv_signal, sigset)
// are libc's own, given the trampoline: libc picks the flags and the mask
// (and, for signal, whether siginterrupt asked for no SA_RESTART), and
// weft only records the user's handler and translates the old one back.
//
// A handler's forms are recorded apart (one table per trampoline) and the
// recorded handler changes before the kernel's action does, so a
// trampoline always finds a handler of its own form: a delivery racing
// with a change of handler runs the old or the new one, as with libc.
//
// Ending: a handler that returns, throws (HandlerScope's destructor) or
// longjmps out (glibc's longjmp, siglongjmp and __longjmp_chk run the
// cleanup buffers of the frames they unwind, _longjmp_unwind: HandlerScope
// registers one) leaves the depth as it found it. A handler that leaves by
// setcontext or swapcontext is not seen leaving (docs/io.md).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <csignal>
#include <optional>

#include "hook_support.h"
#include "real_calls.h"
#include "signal_handlers.h"

// libc's sigaction under its other name: the one the hooks do not define.
extern "C" int __sigaction(int signo, const struct sigaction* action, struct sigaction* old) noexcept;

// glibc's cleanup buffers, which its longjmp runs for the frames it
// unwinds; declared by <pthread.h> only for C without exceptions.
extern "C" void _pthread_cleanup_push(_pthread_cleanup_buffer* buffer, void (*routine)(void*), void* arg) noexcept;
extern "C" void _pthread_cleanup_pop(_pthread_cleanup_buffer* buffer, int execute) noexcept;

namespace weft::detail {

[[gnu::tls_model("initial-exec")]] constinit thread_local unsigned signal_handler_depth = 0;

namespace {

using PlainHandler = void (*)(int);
using SiginfoHandler = void (*)(int, siginfo_t*, void*);

// The user's handler per signal, by form.
constinit std::atomic<PlainHandler> plain_handlers[NSIG] = {};
constinit std::atomic<SiginfoHandler> siginfo_handlers[NSIG] = {};

// Counts one handler in signal_handler_depth from construction until the
// handler's frame is gone, however it goes.
class HandlerScope {
 public:
  HandlerScope() noexcept : outer_(signal_handler_depth) {
    _pthread_cleanup_push(&unwound_, &HandlerScope::on_longjmp, this);
    signal_handler_depth = outer_ + 1;
  }
  ~HandlerScope() {
    _pthread_cleanup_pop(&unwound_, 0);
    signal_handler_depth = outer_;
  }
  HandlerScope(const HandlerScope&) = delete;
  HandlerScope& operator=(const HandlerScope&) = delete;

 private:
  static void on_longjmp(void* self) noexcept { signal_handler_depth = static_cast<HandlerScope*>(self)->outer_; }

  const unsigned outer_;  // the depth of the code this handler interrupted
  _pthread_cleanup_buffer unwound_;
};

// A handler of SA_SIGINFO's form as struct sigaction's sa_handler reads
// it (the two share a union), and back.
PlainHandler as_plain(SiginfoHandler handler) noexcept {
  struct sigaction action {};
  action.sa_sigaction = handler;
  return action.sa_handler;
}
SiginfoHandler as_siginfo(PlainHandler handler) noexcept {
  struct sigaction action {};
  action.sa_handler = handler;
  return action.sa_sigaction;
}

// Installed without SA_SIGINFO, and still of three parameters: the kernel
// passes every handler the siginfo and ucontext addresses after the
// signal number (x86-64 whatever the flags; elsewhere the registers hold
// what they held), and handlers declared with three parameters (BSD's
// form) read the interrupted context there. So the user's handler is
// called with all three, as the kernel would have called it (the call
// through another function type is the kernel's own: Clang's
// -fsanitize=function is told so).
#if defined(__clang__)
[[clang::no_sanitize("function")]]
#endif
void trampoline_plain(int signo, siginfo_t* info, void* context) {
  const HandlerScope scope;
  if (PlainHandler handler = plain_handlers[signo].load(std::memory_order_acquire))
    as_siginfo(handler)(signo, info, context);
}

void trampoline_siginfo(int signo, siginfo_t* info, void* context) {
  const HandlerScope scope;
  if (SiginfoHandler handler = siginfo_handlers[signo].load(std::memory_order_acquire)) handler(signo, info, context);
}

// trampoline_plain as the kernel's action holds it.
PlainHandler plain_trampoline() noexcept { return as_plain(&trampoline_plain); }

bool is_trampoline(PlainHandler handler) noexcept {
  return handler == plain_trampoline() || handler == as_plain(&trampoline_siginfo);
}

// A handler weft wraps: a function, not SIG_DFL, SIG_IGN, SIG_HOLD or
// SIG_ERR, for a signal with a slot.
bool wraps(int signo, PlainHandler handler) noexcept {
  return signo > 0 && signo < NSIG && handler != SIG_DFL && handler != SIG_IGN && handler != SIG_ERR &&
         handler != SIG_HOLD && !is_trampoline(handler);
}

// The user's handlers of one signal as they were before a change, for
// what the call reports as the old action.
struct Recorded {
  PlainHandler plain = nullptr;
  SiginfoHandler siginfo = nullptr;
  explicit Recorded(int signo) noexcept {
    if (signo <= 0 || signo >= NSIG) return;
    plain = plain_handlers[signo].load(std::memory_order_relaxed);
    siginfo = siginfo_handlers[signo].load(std::memory_order_relaxed);
  }
  PlainHandler user_of(PlainHandler handler) const noexcept {
    if (handler == plain_trampoline()) return plain;
    if (handler == as_plain(&trampoline_siginfo)) return as_plain(siginfo);
    return handler;
  }
};

// Held by every call that changes or reads an action: a change of the
// recorded handler and the kernel's action is one step for other threads,
// and reads see both. Signals are blocked on the calling thread meanwhile,
// since a handler may install a handler too (a System V one reinstalls
// itself). Fork waits for it (the child would inherit it held).
SpinLock install_lock;

class [[nodiscard]] Installing {
 public:
  Installing() noexcept {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &caller_mask_);
    install_lock.lock();
    held_here = true;
  }
  ~Installing() {
    held_here = false;
    install_lock.unlock();
    pthread_sigmask(SIG_SETMASK, &caller_mask_, nullptr);
  }
  Installing(const Installing&) = delete;
  Installing& operator=(const Installing&) = delete;

  // Whether this thread is inside an Installing: then a sigaction reached
  // from the real call it makes (ThreadSanitizer's signal() calls
  // sigaction, which is this library's) is that call's own work, already
  // recorded, and must not take the lock again.
  static bool held_by_this_thread() noexcept { return held_here; }

  // The caller's signal mask, which the destructor puts back: what a call
  // that reads or changes the mask (sigset) works on meanwhile.
  sigset_t& caller_mask() noexcept { return caller_mask_; }

 private:
  static thread_local bool held_here;
  sigset_t caller_mask_;
};
thread_local bool Installing::held_here = false;

// Fork holds the lock as any call that installs does, signals blocked: a
// handler that installs one (a SIGCHLD reaper reinstalling itself) and
// interrupts its thread's fork would otherwise spin on the lock its own
// thread holds, for good.
thread_local std::optional<Installing> installing_across_fork;

[[gnu::constructor]] void register_fork_handler() {
  pthread_atfork([] { installing_across_fork.emplace(); }, [] { installing_across_fork.reset(); },
                 [] { installing_across_fork.reset(); });
}

// sigaction, with Installing held: `action` with the trampoline of its
// form, and the old action with the user's handler.
int install(int signo, const struct sigaction* action, struct sigaction* old) noexcept {
  const Recorded before(signo);
  struct sigaction wrapped {};
  const struct sigaction* installed = action;
  if (action != nullptr && wraps(signo, action->sa_handler)) {
    wrapped = *action;
    if (action->sa_flags & SA_SIGINFO) {
      siginfo_handlers[signo].store(action->sa_sigaction, std::memory_order_release);
      wrapped.sa_sigaction = &trampoline_siginfo;
    } else {
      plain_handlers[signo].store(action->sa_handler, std::memory_order_release);
      wrapped.sa_handler = plain_trampoline();
    }
    installed = &wrapped;
  }
  const int result = real::sigaction()(signo, installed, old);
  if (result != 0) {
    if (installed == &wrapped) {
      plain_handlers[signo].store(before.plain, std::memory_order_relaxed);
      siginfo_handlers[signo].store(before.siginfo, std::memory_order_relaxed);
    }
    return result;
  }
  if (old != nullptr) old->sa_handler = before.user_of(old->sa_handler);
  return result;
}

// Records `handler` as the one of `signal`'s plain form, for a legacy call
// about to install trampoline_plain; returns what to install.
PlainHandler record_plain(int signo, PlainHandler handler) noexcept {
  if (!wraps(signo, handler)) return handler;
  plain_handlers[signo].store(handler, std::memory_order_release);
  return plain_trampoline();
}

// A legacy call (signal, sigset...) made with the trampoline in place of
// the user's handler; on failure the recorded handler is put back.
template <class Call>
PlainHandler legacy_install(int signo, PlainHandler handler, Call&& call) noexcept {
  if (!hooks_enabled()) return call(handler);
  const Installing installing;
  const Recorded before(signo);
  const PlainHandler installed = record_plain(signo, handler);
  const PlainHandler old = call(installed);
  if (old == SIG_ERR && installed != handler) plain_handlers[signo].store(before.plain, std::memory_order_relaxed);
  return before.user_of(old);
}

}  // namespace

void wrap_installed_signal_handlers() noexcept {
  if (!hooks_enabled()) return;
  for (int signo = 1; signo < NSIG; ++signo) {
    const Installing installing;
    struct sigaction action {};
    // EINVAL for the signals libc keeps for itself (SIGCANCEL, SIGSETXID).
    if (real::sigaction()(signo, nullptr, &action) != 0 || !wraps(signo, action.sa_handler)) continue;
    if (action.sa_flags & SA_SIGINFO) {
      siginfo_handlers[signo].store(action.sa_sigaction, std::memory_order_release);
      action.sa_sigaction = &trampoline_siginfo;
    } else {
      plain_handlers[signo].store(action.sa_handler, std::memory_order_release);
      action.sa_handler = plain_trampoline();
    }
    real::sigaction()(signo, &action, nullptr);
  }
}

namespace {

// Set by libweft's constructor, before it wraps what is installed. Until
// then sigaction is libc's, and runs no instrumented code: a sanitizer's
// runtime installs its own handlers during its initialisation, before any
// constructor, through the next sigaction in the search order, which is
// this one, and ThreadSanitizer's function-entry hook crashes there (its
// thread state is not made yet). Those handlers are then wrapped with the
// rest. A plain int read with __atomic builtins: std::atomic's load is an
// instrumented function.
constinit int wrapping = 0;

[[gnu::constructor]] void wrap_at_load() {
  __atomic_store_n(&wrapping, 1, __ATOMIC_RELEASE);
  wrap_installed_signal_handlers();
}

int sigaction_hooked(int signo, const struct sigaction* action, struct sigaction* old) noexcept {
  if (!hooks_enabled() || Installing::held_by_this_thread()) return real::sigaction()(signo, action, old);
  const Installing installing;
  return install(signo, action, old);
}

}  // namespace

}  // namespace weft::detail

using namespace weft::detail;

extern "C" {
// libc's names, interposed: exported, unlike the rest of libweft
// (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)

// Not instrumented by a sanitizer, not even at its entry (above, `wrapping`).
#if defined(__clang__)
[[clang::disable_sanitizer_instrumentation]]
#else
[[gnu::no_sanitize("thread")]]
#endif
int sigaction(int signo, const struct sigaction* action, struct sigaction* old) noexcept {
  if (__atomic_load_n(&wrapping, __ATOMIC_ACQUIRE) == 0) return __sigaction(signo, action, old);
  return sigaction_hooked(signo, action, old);
}

sighandler_t signal(int signo, sighandler_t handler) noexcept {
  return legacy_install(signo, handler, [&](sighandler_t h) { return real::signal()(signo, h); });
}

sighandler_t bsd_signal(int signo, sighandler_t handler) noexcept {
  return legacy_install(signo, handler, [&](sighandler_t h) { return real::bsd_signal()(signo, h); });
}

sighandler_t ssignal(int signo, sighandler_t handler) noexcept {
  return legacy_install(signo, handler, [&](sighandler_t h) { return real::ssignal()(signo, h); });
}

sighandler_t sysv_signal(int signo, sighandler_t handler) noexcept {
  return legacy_install(signo, handler, [&](sighandler_t h) { return real::sysv_signal()(signo, h); });
}

sighandler_t __sysv_signal(int signo, sighandler_t handler) noexcept {
  return legacy_install(signo, handler, [&](sighandler_t h) { return real::__sysv_signal()(signo, h); });
}

// libc's sigset reads and changes the caller's mask, which Installing has
// blocked whole: so it is System V's rule made here, on the caller's mask
// (glibc's sysdeps/posix/sigset.c): SIG_HOLD blocks the signal; any other
// disposition is installed with an empty mask and no flags, and unblocks
// it. Either returns SIG_HOLD if the signal was blocked, else the handler.
sighandler_t sigset(int signo, sighandler_t handler) noexcept {
  if (!hooks_enabled() || handler == SIG_ERR || signo <= 0 || signo >= NSIG) return real::sigset()(signo, handler);
  Installing installing;
  sigset_t& mask = installing.caller_mask();
  const bool was_held = sigismember(&mask, signo) == 1;
  struct sigaction old {};
  if (handler == SIG_HOLD) {
    sigaddset(&mask, signo);
    if (was_held) return SIG_HOLD;
    return install(signo, nullptr, &old) == 0 ? old.sa_handler : SIG_ERR;
  }
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  if (install(signo, &action, &old) != 0) return SIG_ERR;
  sigdelset(&mask, signo);
  return was_held ? SIG_HOLD : old.sa_handler;
}

#pragma GCC visibility pop
}  // extern "C"
