// The C++ runtime's exception state, kept per context instead of per
// thread. The Itanium C++ ABI keeps, for each thread, the exceptions being
// handled (the stack of caught ones that `throw;` and
// std::current_exception() read, and that the end of a catch block frees)
// and the count of those thrown but not yet caught
// (std::uncaught_exceptions()), in one struct that __cxa_get_globals()
// returns. A fiber that parks inside a catch block, or in a destructor run
// by unwinding, and resumes on another thread, or after another fiber ran
// on its thread, found another fiber's exceptions there: `throw;`
// rethrew another task's exception, a catch block's end freed another
// fiber's live exception object (a use after free), and scope guards that
// ask std::uncaught_exceptions() decided wrongly. So every switch saves the
// thread's state into the context it leaves and loads the state of the one
// it resumes, as folly's fibers and Go's per-goroutine panics keep theirs.
#pragma once

namespace weft::detail {

// The layout of libstdc++'s and libc++abi's __cxa_eh_globals on every
// target but ARM's EHABI (which adds a third field): checked at build time
// on the targets weft builds for (exception_state.cpp).
struct ExceptionState {
  void* caught = nullptr;     // __cxa_exception* caughtExceptions
  unsigned int uncaught = 0;  // uncaughtExceptions
};

// The calling thread's __cxa_eh_globals, once asked (the C++ runtime's own
// thread-local, whose address does not change while the thread lives).
// Initial-exec: no allocation at a thread's first switch.
[[gnu::tls_model("initial-exec")]] extern constinit thread_local ExceptionState* thread_exception_state_cached;
ExceptionState& ask_thread_exception_state() noexcept;

// The calling thread's state, the C++ runtime's own: a load at every
// switch, a call at a thread's first.
inline ExceptionState& thread_exception_state() noexcept {
  if (ExceptionState* state = thread_exception_state_cached) [[likely]]
    return *state;
  return ask_thread_exception_state();
}

}  // namespace weft::detail
