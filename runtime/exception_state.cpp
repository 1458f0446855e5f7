#include "exception_state.h"

#include <cxxabi.h>

namespace weft::detail {

// ARM's EHABI (32-bit ARM without DWARF unwinding) adds a third field.
#if defined(__arm__) && !defined(__ARM_DWARF_EH__)
#error "weft: ARM EHABI's __cxa_eh_globals has a third field (propagatingExceptions); add it to ExceptionState"
#endif

[[gnu::tls_model("initial-exec")]] constinit thread_local ExceptionState* thread_exception_state_cached = nullptr;

ExceptionState& ask_thread_exception_state() noexcept {
  thread_exception_state_cached = reinterpret_cast<ExceptionState*>(abi::__cxa_get_globals());
  return *thread_exception_state_cached;
}

}  // namespace weft::detail
