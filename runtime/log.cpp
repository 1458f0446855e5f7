#include "log.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <weft/detail/spin_lock.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "system_calls.h"

namespace weft::detail {
namespace {

// The handler, and whether this process set it or inherited it across a
// fork. A message copies the pointer under the lock and calls the handler
// after releasing it, so a slow handler holds up no one else's message and
// may itself call set_log_handler. A spin lock, not a std::mutex: a message
// may be written with one of weft's spin locks held, where nothing may
// park, and the lock guards a pointer copy only.
struct Sink {
  SpinLock lock;
  std::shared_ptr<const LogHandler> handler;  // guarded by lock; null: stderr
  bool inherited = false;                     // guarded by lock: set in a forked child
};

// Constant-initialized and never destroyed: a message may come before any
// constructor has run, or from a thread still running during static
// destruction (a detached fiber's worker at exit).
union NeverDestroyed {
  constexpr NeverDestroyed() : sink() {}
  ~NeverDestroyed() {}
  Sink sink;
};
constinit NeverDestroyed storage;

// The lock is held across fork() and released on both sides, so that a
// child never inherits it held by a thread it does not have.
[[gnu::constructor]] void register_fork_handlers() {
  pthread_atfork([] { storage.sink.lock.lock(); }, [] { storage.sink.lock.unlock(); },
                 [] {
                   storage.sink.inherited = true;
                   storage.sink.lock.unlock();
                 });
}

std::shared_ptr<const LogHandler> current_handler() noexcept {
  Sink& sink = storage.sink;
  const std::lock_guard guard(sink.lock);
  if (sink.inherited) return nullptr;
  return sink.handler;
}

// `text` has room for one more byte (the newline stderr gets), so that
// appending it cannot throw.
void deliver(LogLevel level, std::string& text) noexcept {
  if (std::shared_ptr<const LogHandler> handler = current_handler()) {
    try {
      (*handler)(level, text);
      return;
    } catch (...) {
      write_stderr("weft: the log handler threw; its message follows\n");
    }
  }
  text += '\n';
  std::fflush(stderr);                     // what the program printed before comes first
  write_stderr(text.data(), text.size());  // one write(2): messages of several threads do not interleave
}

}  // namespace

void log_message(LogLevel level, const char* format, ...) noexcept {
  const int saved_errno = errno;  // the caller's, which it may go on to read
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int size = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string text;
  bool allocated = size >= 0;
  if (allocated) {
    try {
      text.reserve(static_cast<std::size_t>(size) + 1);
      text.resize(static_cast<std::size_t>(size));
    } catch (const std::bad_alloc&) {
      allocated = false;
    }
  }
  if (allocated) {
    std::vsnprintf(text.data(), text.size() + 1, format, again);
    va_end(again);
    deliver(level, text);
    errno = saved_errno;
    return;
  }
  char buffer[1024];
  const int written = std::vsnprintf(buffer, sizeof buffer - 1, format, again);
  va_end(again);
  const std::size_t length = written < 0 ? 0 : std::min<std::size_t>(written, sizeof buffer - 2);
  buffer[length] = '\n';
  std::fflush(stderr);
  write_stderr(buffer, length + 1);
  errno = saved_errno;
}

void write_stderr(const char* text, std::size_t size) noexcept {
  while (size > 0) {
    const long n = sys::call(SYS_write, STDERR_FILENO, text, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text += n;
    size -= static_cast<std::size_t>(n);
  }
}

}  // namespace weft::detail

namespace weft {

void set_log_handler(LogHandler handler) {
  std::shared_ptr<const LogHandler> next;
  if (handler) next = std::make_shared<const LogHandler>(std::move(handler));
  detail::Sink& sink = detail::storage.sink;
  {
    const std::lock_guard guard(sink.lock);
    next.swap(sink.handler);
    sink.inherited = false;
  }
  // The previous handler is released here, outside the lock; a message
  // being delivered to it holds a reference of its own.
}

std::string_view to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::warning:
      return "warning";
    case LogLevel::error:
      return "error";
    case LogLevel::fatal:
      return "fatal";
  }
  return "unknown";
}

}  // namespace weft
