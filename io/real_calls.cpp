#include "real_calls.h"

#include <dlfcn.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace weft::detail::real {

void* resolve(const char* name) noexcept {
  // dlsym may set dlerror state and errno; the hook's caller must not see
  // either change.
  const int saved = errno;
  void* fn = dlsym(RTLD_NEXT, name);
  if (fn == nullptr) {
    if (void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD)) fn = dlsym(libc, name);
  }
  if (fn == nullptr) {
    std::fprintf(stderr,
                 "weft: cannot find the real %s() behind weft's hook (no later object and no libc.so.6 defines it)\n",
                 name);
    std::abort();
  }
  errno = saved;
  return fn;
}

}  // namespace weft::detail::real

namespace weft::detail {

// Out of line and not inlinable, so that each call asks for the calling
// thread's errno again (see real_calls.h).
[[gnu::noinline]] int errno_value() noexcept {
  asm volatile("" ::: "memory");
  return errno;
}

[[gnu::noinline]] void set_errno(int value) noexcept {
  asm volatile("" ::: "memory");
  errno = value;
}

}  // namespace weft::detail
