#include "exception_state.h"

#include <cxxabi.h>

namespace weft::detail {

// ARM's EHABI (32-bit ARM without DWARF unwinding) adds a third field.
#if defined(__arm__) && !defined(__ARM_DWARF_EH__)
#error "weft: ARM EHABI's __cxa_eh_globals has a third field (propagatingExceptions); add it to ExceptionState"
#endif

namespace {

// The thread's __cxa_eh_globals, asked once per thread: the runtime's own
// thread-local, whose address does not change while the thread lives.
// Initial-exec: no allocation at a thread's first switch.
[[gnu::tls_model("initial-exec")]] constinit thread_local ExceptionState* thread_state = nullptr;

}  // namespace

ExceptionState& thread_exception_state() noexcept {
  if (thread_state == nullptr) [[unlikely]]
    thread_state = reinterpret_cast<ExceptionState*>(abi::__cxa_get_globals());
  return *thread_state;
}

}  // namespace weft::detail
