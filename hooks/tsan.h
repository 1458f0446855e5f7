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
