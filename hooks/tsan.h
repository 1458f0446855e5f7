// WEFT_HOOKS_TSAN: defined when the hooks are built with ThreadSanitizer,
// whose interceptors they run inside (hooks/hook_support.h, ParkScope).
#pragma once

#if defined(__SANITIZE_THREAD__)
#define WEFT_HOOKS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_HOOKS_TSAN 1
#endif
#endif
#ifdef WEFT_HOOKS_TSAN
#include <sanitizer/tsan_interface.h>
#endif

// For a function that switches TSan fibers (a scope's constructor or
// destructor): TSan records each instrumented function's entry on the
// TSan fiber current at its entry and its exit on the one current at its
// exit, so such a function would leave one fiber's shadow stack one frame
// short, and a second one nested in it (a scope held by another's
// constructor) would leave it two short, which crashes TSan's next stack
// trace. Not instrumented, it leaves both as they were: the function that
// holds the scope enters and leaves on the same TSan fiber.
#if defined(__clang__)
#define WEFT_TSAN_SWITCHES [[clang::disable_sanitizer_instrumentation]]
#else
#define WEFT_TSAN_SWITCHES [[gnu::no_sanitize_thread]]
#endif

// For a function whose memory accesses TSan must not see (hooks/
// pthread_layout.h, CondWord): out of line, so that no instrumented caller
// inlines it, and not instrumented, atomics included. Nothing outside TSan.
#ifdef WEFT_HOOKS_TSAN
#define WEFT_UNSEEN_BY_TSAN [[gnu::noinline]] WEFT_TSAN_SWITCHES
#else
#define WEFT_UNSEEN_BY_TSAN
#endif
