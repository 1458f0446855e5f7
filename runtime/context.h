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

#include "fcontext.h"

namespace weft::detail {

// Runs on the resumed side, right after the switch, with the context that
// was switched away from (now safely saved).
struct SwitchAction {
  void (*run)(void* arg) = nullptr;
  void* arg = nullptr;
};

struct ExecutionContext {
  fcontext_t saved = nullptr;  // where to resume
  bool fresh = false;          // made by make_context, not yet run
  // The stack this context runs on, for AddressSanitizer.
  const void* stack_bottom = nullptr;
  std::size_t stack_size = 0;
  void* asan_fake_stack = nullptr;
  void* tsan_fiber = nullptr;  // ThreadSanitizer's handle for this context
};

// The entry point of a new context. Its first act must be
// complete_switch(self, transfer): that finishes the switch that started it.
using ContextEntry = void (*)(transfer_t);

// Prepares `ctx` to start at `entry` on the stack [bottom, bottom + size).
// `sanitizer_fiber` comes from the stack (Stack::sanitizer_fiber()).
void make_context(ExecutionContext& ctx, void* bottom, std::size_t size, ContextEntry entry, void* sanitizer_fiber);
// Describes the calling thread's own stack (a worker's scheduling loop).
void adopt_thread_context(ExecutionContext& ctx);
// ThreadSanitizer's per-fiber state costs about 2 ms to create and destroy,
// so it is made once per stack and reused with the stack from the pool.
// Null (and free) in other builds.
void* new_sanitizer_fiber();
void delete_sanitizer_fiber(void* fiber);

// Saves the caller into `from`, resumes `to`, and runs `action` there.
// Returns when something switches back to `from`.
void switch_context(ExecutionContext& from, ExecutionContext& to, SwitchAction action);
// The last switch of a context that has finished: never returns.
[[noreturn]] void exit_context(ExecutionContext& from, ExecutionContext& to, SwitchAction action);
// Completes the switch that started a fresh context (see ContextEntry).
void complete_switch(ExecutionContext& self, transfer_t transfer);

// Under AddressSanitizer, clears stale poison from a reused stack.
void unpoison_stack(void* bottom, std::size_t size);

}  // namespace weft::detail
