// Under ThreadSanitizer: its symbolizer, set up before any fiber runs.
//
// TSan symbolizes a report's stacks (and every suppressed report's, to
// match tests' suppressions) with libbacktrace, which at its first use
// opens the program and each loaded library through open(), and so through
// TSan's interceptor and libweft's open hook, while the reporting thread
// holds TSan's thread registry. The hook's code is instrumented: should it
// find a race there (the fd table's record of an fd another thread just
// closed), the nested report waits for the registry its own thread holds,
// and the process hangs. Symbolizing one address at start-up, before main,
// makes libbacktrace open what it needs then; a report later opens nothing.
// Libraries loaded by dlopen afterwards are not covered.
//
// Inside the symbolizer TSan serves malloc and free from its own internal
// allocator, and freeing there a block the program's allocator made aborts
// TSan (a CHECK): the hooks' first open and close, which look up libc's
// functions with dlsym (and dlsym frees the last dlerror string), are made
// once before, outside it.
#include "tsan.h"

#ifdef WEFT_HOOKS_TSAN
#include <fcntl.h>
#include <sanitizer/common_interface_defs.h>
#include <unistd.h>

namespace weft::detail {
namespace {

[[gnu::constructor]] void set_up_tsan_symbolizer() {
  if (const int fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC); fd >= 0) ::close(fd);
  char description[256];
  __sanitizer_symbolize_pc(reinterpret_cast<void*>(&set_up_tsan_symbolizer), "%p %F %L", description,
                           sizeof(description));
}

}  // namespace
}  // namespace weft::detail
#endif
