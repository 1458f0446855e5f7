// libc's own function behind a hook, for the tests that link the shared
// libweft: its hooks/real_calls are not exported, and dlsym(RTLD_NEXT) from the
// test program would find libweft's hook. libc.so.6 is asked directly.
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace weft::test {

// libc_function<decltype(::poll)>("poll")(fds, n, 0) polls without the hook.
template <class Fn>
Fn* libc_function(const char* name) {
  void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  void* fn = libc == nullptr ? nullptr : dlsym(libc, name);
  if (fn == nullptr) {
    std::fprintf(stderr, "test: libc.so.6 has no %s\n", name);
    std::abort();
  }
  return reinterpret_cast<Fn*>(fn);
}

}  // namespace weft::test
