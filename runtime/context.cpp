#include "context.h"

#include <pthread.h>

#include <cstdlib>
#include <cstring>

#if defined(__SANITIZE_ADDRESS__)
#define WEFT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define WEFT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_TSAN 1
#endif
#endif

#ifdef WEFT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef WEFT_TSAN
#include <sanitizer/tsan_interface.h>
#endif

// Where a finished context's last switch is made (exit_context). The
// sanitizers must be told of a switch right before it, in a frame that does
// not return afterwards: ThreadSanitizer would charge the return to the
// next fiber's stack. So under them the switch is made deep in the finished
// fiber's stack, where it is announced, as it is on Boost.Context, whose
// entries cannot return.
#if defined(WEFT_OWN_FCONTEXT) && !defined(WEFT_ASAN) && !defined(WEFT_TSAN)
#define WEFT_LAST_SWITCH_BY_RETURN 1
#endif

namespace weft::detail {

namespace {

// Before the jump: tell the sanitizers where we are going. A finishing
// context passes no fake-stack slot, so ASan frees its fake stack.
inline void announce_switch([[maybe_unused]] ExecutionContext& from, [[maybe_unused]] ExecutionContext& to,
                            [[maybe_unused]] bool finishing) {
#ifdef WEFT_ASAN
  __sanitizer_start_switch_fiber(finishing ? nullptr : &from.asan_fake_stack, to.stack_bottom, to.stack_size);
#endif
#ifdef WEFT_TSAN
  __tsan_switch_to_fiber(to.tsan_fiber, 0);
#endif
}

inline void finish_switch(ExecutionContext& self, transfer_t transfer) {
#ifdef WEFT_ASAN
  __sanitizer_finish_switch_fiber(self.asan_fake_stack, nullptr, nullptr);
#else
  (void)self;
#endif
  SwitchMessage message = *static_cast<SwitchMessage*>(transfer.data);
  message.from->saved = transfer.fctx;
  if (message.action.run != nullptr) message.action.run(message.action.arg);
}

#ifndef WEFT_OWN_FCONTEXT
// Boost.Context's entries return nothing: find the context's own entry
// through the message of the switch that started it.
void start_fresh_context(transfer_t transfer) {
  static_cast<SwitchMessage*>(transfer.data)->to->entry(transfer);
  std::abort();  // exit_context() switched away for good
}
#endif

}  // namespace

void make_context(ExecutionContext& ctx, void* bottom, std::size_t size, ContextEntry entry, void* sanitizer_fiber) {
  ctx.stack_bottom = bottom;
  ctx.stack_size = size;
  ctx.asan_fake_stack = nullptr;
  ctx.tsan_fiber = sanitizer_fiber;
  ctx.entry = entry;
  ctx.exceptions = {};
#ifdef WEFT_OWN_FCONTEXT
  ctx.saved = make_fcontext(static_cast<char*>(bottom) + size, size, entry);
#else
  // Boost's fresh frame has no return address a debugger can stop at: gdb
  // reads on above it, so the top of the stack keeps a few zeroed words
  // (with the stack taken at a fiber's first run, nothing else is there).
  constexpr std::size_t kTopWords = 64;
  char* top = static_cast<char*>(bottom) + size - kTopWords;
  std::memset(top, 0, kTopWords);
  ctx.saved = make_fcontext(top, size - kTopWords, &start_fresh_context);
#endif
}

bool thread_stack_bounds(void*& bottom, std::size_t& size) noexcept {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return false;
  bottom = nullptr;
  size = 0;
  const bool known = pthread_attr_getstack(&attr, &bottom, &size) == 0 && bottom != nullptr;
  pthread_attr_destroy(&attr);
  return known;
}

void adopt_thread_context(ExecutionContext& ctx) {
  void* bottom = nullptr;
  std::size_t size = 0;
  if (thread_stack_bounds(bottom, size)) {
    ctx.stack_bottom = bottom;
    ctx.stack_size = size;
  }
#ifdef WEFT_TSAN
  ctx.tsan_fiber = __tsan_get_current_fiber();
#endif
}

void* new_sanitizer_fiber() {
#ifdef WEFT_TSAN
  return __tsan_create_fiber(0);
#else
  return nullptr;
#endif
}

void delete_sanitizer_fiber([[maybe_unused]] void* fiber) {
#ifdef WEFT_TSAN
  if (fiber != nullptr) __tsan_destroy_fiber(fiber);
#endif
}

void forget_stack_memory([[maybe_unused]] void* base, [[maybe_unused]] std::size_t size) noexcept {
#ifdef WEFT_ASAN
  __asan_unpoison_memory_region(base, size);
#endif
}

void switch_context(ExecutionContext& from, ExecutionContext& to, SwitchAction action) {
  // The thread's exception state is the running context's: kept with
  // `from`, `to`'s put in its place (exception_state.h).
  ExceptionState& exceptions = thread_exception_state();
  from.exceptions = exceptions;
  exceptions = to.exceptions;
  SwitchMessage message{&from, &to, action};
  announce_switch(from, to, false);
  transfer_t back = jump_fcontext(to.saved, &message);
  finish_switch(from, back);
}

transfer_t exit_context(ExecutionContext& from, ExecutionContext& to, SwitchAction action) {
  // The message outlives the finished context's frames. A finished context
  // handles no exception: `to`'s state is the thread's now.
  thread_exception_state() = to.exceptions;
  from.exit_message = SwitchMessage{&from, &to, action};
#ifdef WEFT_LAST_SWITCH_BY_RETURN
  return transfer_t{to.saved, &from.exit_message};
#else
  announce_switch(from, to, true);
  jump_fcontext(to.saved, &from.exit_message);
  std::abort();  // a finished context is never resumed
#endif
}

void complete_switch(ExecutionContext& self, transfer_t transfer) { finish_switch(self, transfer); }

void unpoison_stack([[maybe_unused]] void* bottom, [[maybe_unused]] std::size_t size) {
#ifdef WEFT_ASAN
  ASAN_UNPOISON_MEMORY_REGION(bottom, size);
#endif
}

}  // namespace weft::detail
