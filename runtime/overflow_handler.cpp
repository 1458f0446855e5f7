#include "overflow_handler.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "fiber_control.h"
#include "log.h"
#include "system_calls.h"

namespace weft::detail {
namespace {

struct sigaction previous_segv;
struct sigaction previous_bus;

// Not through weft's log handler (runtime/log.h): this runs in a signal
// handler.
void write_text(const char* text) noexcept { write_stderr(text); }

void write_number(std::uint64_t value) noexcept {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  char out[24];
  for (int i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  write_stderr(out, static_cast<std::size_t>(n));
}

// Before a handler that was installed before ours runs: what the kernel
// would have done had it delivered the signal to that handler itself. Its
// mask: the interrupted code's, with the handler's sa_mask and, unless
// SA_NODEFER, the signal (ours blocks the signal and nothing else; a
// handler that longjmps out with SA_NODEFER left SIGSEGV blocked, and the
// next fault killed the process). SA_RESETHAND: the default disposition
// from this delivery on (ours stayed, and a one-shot handler that
// returned ran again at every retry of the faulting instruction). The
// default is the saved handler's, not the process's: weft's own stays, so
// that a later fiber's overflow is still named.
void deliver_as_the_kernel_would(int signal, struct sigaction& previous, void* context) noexcept {
  sigset_t mask;
  sigorset(&mask, &static_cast<ucontext_t*>(context)->uc_sigmask, &previous.sa_mask);
  if ((previous.sa_flags & SA_NODEFER) == 0) sigaddset(&mask, signal);
  sys::set_signal_mask(mask);
  if ((previous.sa_flags & SA_RESETHAND) != 0) {
    // The handler first (its union with sa_sigaction: both read null),
    // then the flags: a fault on another thread reads one or the other.
    previous.sa_handler = SIG_DFL;
    previous.sa_flags = 0;
  }
}

// Whether the signal was sent by a process (kill(2), tgkill(2),
// sigqueue(3)) rather than raised by the kernel for a fault: si_code is
// then SI_USER or below (and si_addr holds no address).
bool sent(const siginfo_t& info) noexcept { return info.si_code <= 0; }

// Hands a fault that is not ours to whoever handled it before us.
void forward(int signal, siginfo_t* info, void* context) noexcept {
  struct sigaction& previous = signal == SIGBUS ? previous_bus : previous_segv;
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    const auto handler = previous.sa_sigaction;
    deliver_as_the_kernel_would(signal, previous, context);
    handler(signal, info, context);
    return;
  }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler != nullptr) {
    const auto handler = previous.sa_handler;
    deliver_as_the_kernel_would(signal, previous, context);
    handler(signal);
    return;
  }
  // Default action: restore it and return; the faulting instruction runs
  // again and the kernel delivers the signal with its default effect. A
  // signal sent (kill(2), raise(3), sigqueue(3)) has no instruction to
  // run again: sent once more, to this thread, where it stays pending
  // until the handler returns (the signal is blocked in it).
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sys::sigaction(signal, &fallback, nullptr);
  if (sent(*info)) sys::call(SYS_tgkill, sys::call(SYS_getpid), sys::call(SYS_gettid), signal);
}

// The interrupted stack pointer; null where it is not known.
const void* stack_pointer(void* context) noexcept {
  auto* uc = static_cast<ucontext_t*>(context);
#if defined(__x86_64__)
  return reinterpret_cast<const void*>(uc->uc_mcontext.gregs[REG_RSP]);
#elif defined(__aarch64__)
  return reinterpret_cast<const void*>(uc->uc_mcontext.sp);
#else
  (void)uc;
  return nullptr;
#endif
}

void on_fault(int signal, siginfo_t* info, void* context) {
  FiberControl* fiber = current_fiber();
  const void* sp = stack_pointer(context);
  if (fiber != nullptr && !sent(*info) && fiber->stack.overflowed(info->si_addr, sp)) {
    // How far below the usable range the frame reached: the lower of the
    // fault and the stack pointer.
    const auto bottom = reinterpret_cast<std::uintptr_t>(fiber->stack.bottom());
    auto low = reinterpret_cast<std::uintptr_t>(info->si_addr);
    const auto s = reinterpret_cast<std::uintptr_t>(sp);
    if (s != 0 && s < low) low = s;
    char name[64];
    fiber->copy_name(name, sizeof(name));
    write_text("weft: stack overflow in fiber \"");
    write_text(name);
    write_text("\" #");
    write_number(fiber->id);
    write_text(" (stack of ");
    write_number(fiber->stack.usable_size() / 1024);
    if (low < bottom) {
      write_text(" KiB, a frame reached ");
      write_number((bottom - low + 1023) / 1024);
      write_text(" KiB below it");
    } else {
      write_text(" KiB");
    }
    write_text("; raise Config::stack_size or SpawnOptions::stack_size)\n");
    std::abort();
  }
  forward(signal, info, context);
}

}  // namespace

void install_overflow_handler() {
  // A function-local static, not std::call_once: pthread_once is one of
  // the hooks' names (scripts/check-layers).
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_sigaction = &on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sys::sigaction(SIGSEGV, &action, &previous_segv);
    sys::sigaction(SIGBUS, &action, &previous_bus);
    return true;
  }();
  (void)installed;
}

AltSignalStack::AltSignalStack() {
  // Every SA_ONSTACK handler of the process runs here on a worker, where on
  // a plain thread without one it runs on the thread's own stack: room for
  // what such handlers use (a crash reporter's unwinding), only its touched
  // pages resident, and a guard page below, so that one that needs more
  // dies of SIGSEGV instead of writing over whatever is mapped there (64
  // KiB without a guard did).
  const long page = ::sysconf(_SC_PAGESIZE);
  const long asked = ::sysconf(_SC_SIGSTKSZ);
  const std::size_t usable = std::max<std::size_t>(kAltStackBytes, asked > 0 ? 4 * std::size_t(asked) : 0);
  const std::size_t guard = page > 0 ? std::size_t(page) : 4096;
  size_ = usable + guard;
  void* memory = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return;  // no report on overflow, but no crash here either
  stack_t stack{};
  stack.ss_sp = static_cast<char*>(memory) + guard;
  stack.ss_size = usable;
  if (::mprotect(memory, guard, PROT_NONE) != 0 || ::sigaltstack(&stack, nullptr) != 0) {
    ::munmap(memory, size_);
    return;
  }
  memory_ = memory;
}

AltSignalStack::~AltSignalStack() {
  if (memory_ == nullptr) return;
  stack_t disable{};
  disable.ss_flags = SS_DISABLE;
  ::sigaltstack(&disable, nullptr);
  ::munmap(memory_, size_);
}

}  // namespace weft::detail
