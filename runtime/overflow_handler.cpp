#include "overflow_handler.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

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

// Hands a fault that is not ours to whoever handled it before us.
void forward(int signal, siginfo_t* info, void* context) noexcept {
  const struct sigaction& previous = signal == SIGBUS ? previous_bus : previous_segv;
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(signal, info, context);
    return;
  }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler != nullptr) {
    previous.sa_handler(signal);
    return;
  }
  // Default action: restore it and return; the faulting instruction runs
  // again and the kernel delivers the signal with its default effect.
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sys::sigaction(signal, &fallback, nullptr);
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
  if (fiber != nullptr && fiber->stack.overflowed(info->si_addr, sp)) {
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
  size_ = 64 * 1024;
  void* memory = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return;  // no report on overflow, but no crash here either
  stack_t stack{};
  stack.ss_sp = memory;
  stack.ss_size = size_;
  if (::sigaltstack(&stack, nullptr) != 0) {
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
