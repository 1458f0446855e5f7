// weft's messages (include/weft/log.h): every message weft writes goes
// through log_message, to the handler set by weft::set_log_handler or to
// stderr, except where no lock may be taken and no handler called (a
// signal handler: runtime/overflow_handler.cpp, the hooks' resolution of
// libc's functions), which write(2) to stderr themselves.
#pragma once

#include <weft/log.h>

#include <cstddef>

namespace weft::detail {

// Formats as printf does (`format` without a trailing newline) and
// delivers the text, whole. Never throws: should the text's allocation
// fail, what fits a 1 KiB buffer goes to stderr.
[[gnu::format(printf, 2, 3)]] void log_message(LogLevel level, const char* format, ...) noexcept;

// Writes `text` to stderr by the write system call itself: async-signal-
// safe, and not through libweft's write() hook, a checkpoint that may
// switch fibers (hooks/hook_support.h). For the messages above, and for
// those that may be written in a signal handler.
void write_stderr(const char* text, std::size_t size) noexcept;
inline void write_stderr(const char* text) noexcept { write_stderr(text, __builtin_strlen(text)); }

}  // namespace weft::detail
