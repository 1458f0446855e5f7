// The context switch, and the one place that tells the sanitizers about it.
//
// An ExecutionContext is anything we can switch to: a fiber, or a worker's
// own thread stack (its scheduling loop). switch_context() saves the caller
// and resumes the target; the target, once it runs, completes the switch on
// the caller's behalf (stores the caller's saved registers, then runs the
// caller's SwitchAction). That hand-off is what lets a fiber requeue, park or
// free itself only after it has stopped running on its own stack (Go's
// gopark unlockf, Boost.Fiber's "resume with action").
#pragma once

#include <cstddef>

#include "exception_state.h"
#include "fcontext.h"

namespace weft::detail {

// Runs on the resumed side, right after the switch, with the context that
// was switched away from (now safely saved).
struct SwitchAction {
  void (*run)(void* arg) = nullptr;
  void* arg = nullptr;
};

struct ExecutionContext;

// Carried across a switch. The resumed side copies it before running the
// action: once the action has run, the switched-away context may be resumed
// elsewhere and its stack reused.
struct SwitchMessage {
  ExecutionContext* from;
  ExecutionContext* to;  // on Boost.Context, how a fresh context finds its entry
  SwitchAction action;
};

// The entry point of a new context. Its first act must be
// complete_switch(self, transfer), which finishes the switch that started
// it; its last, `return exit_context(...)`.
using ContextEntry = transfer_t (*)(transfer_t);

struct ExecutionContext {
  fcontext_t saved = nullptr;    // where to resume
  ContextEntry entry = nullptr;  // where a fresh context starts
  // The stack this context runs on, for AddressSanitizer.
  const void* stack_bottom = nullptr;
  std::size_t stack_size = 0;
  void* asan_fake_stack = nullptr;
  void* tsan_fiber = nullptr;    // ThreadSanitizer's handle for this context
  SwitchMessage exit_message{};  // of its last switch (exit_context)
  // Its C++ exception state while another context runs (exception_state.h).
  ExceptionState exceptions{};
};

// Prepares `ctx` to start at `entry` on the stack [bottom, bottom + size).
// `sanitizer_fiber` comes from the stack (Stack::sanitizer_fiber()).
void make_context(ExecutionContext& ctx, void* bottom, std::size_t size, ContextEntry entry, void* sanitizer_fiber);
// Describes the calling thread's own stack (a worker's scheduling loop).
void adopt_thread_context(ExecutionContext& ctx);
// The calling thread's stack, as pthread_getattr_np reports it (which
// allocates: never from a signal handler). False if it could not tell.
bool thread_stack_bounds(void*& bottom, std::size_t& size) noexcept;
// ThreadSanitizer's per-fiber state is slow to create and destroy
// (docs/benchmarks.md, "Figures behind the comments"), so it is made once
// per stack and reused with the stack from the pool.
// Null (and free) in other builds.
void* new_sanitizer_fiber();
void delete_sanitizer_fiber(void* fiber);
// Before a stack's memory is unmapped: AddressSanitizer's shadow of frames
// that never returned (a finished fiber's last frames) would otherwise stay
// poisoned, and whatever is mapped there next would be reported as a stack
// buffer overflow.
void forget_stack_memory(void* base, std::size_t size) noexcept;

// Saves the caller into `from`, resumes `to`, and runs `action` there.
// Returns when something switches back to `from`.
void switch_context(ExecutionContext& from, ExecutionContext& to, SwitchAction action);
// The last switch of a context that has finished, to `to`, running
// `action` there. Its entry returns what this returns, and the switch is
// made once the entry's frames are gone (fcontext.h says why). Under the
// sanitizers, and on Boost.Context, it is made here, and this never returns.
[[nodiscard]] transfer_t exit_context(ExecutionContext& from, ExecutionContext& to, SwitchAction action);
// Completes the switch that started a fresh context (see ContextEntry).
void complete_switch(ExecutionContext& self, transfer_t transfer);

// Under AddressSanitizer, clears stale poison from a reused stack.
void unpoison_stack(void* bottom, std::size_t size);

}  // namespace weft::detail
