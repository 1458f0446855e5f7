// weft::set_log_handler: where weft's messages go. weft writes a message
// when something goes wrong that it cannot report to a caller: a misuse
// that ends the process (a joinable Fiber destroyed, a Mutex unlocked by a
// fiber that does not own it), an exception escaping a detached fiber or a
// posted Pool task, fibers still alive at shutdown, weft-dump's server
// unable to start. By default each message is one line (or a few) on
// stderr; a handler receives every one instead, as `on_stuck_worker` does
// for its reports:
//
//   weft::set_log_handler([](weft::LogLevel level, std::string_view text) {
//     spdlog::log(level == weft::LogLevel::warning ? spdlog::level::warn : spdlog::level::err, "{}", text);
//   });
//
// The handler is called on the thread or fiber that writes the message
// (a worker, sysmon, the dump server's thread), perhaps on several at once,
// so it must be thread-safe. It should be quick and must not wait on weft
// primitives: a fatal message may come with a weft lock held, right before
// std::abort() or std::terminate(). If it throws, the message goes to
// stderr after all.
//
// Two kinds of message never reach the handler and go to stderr with
// write(2): the report of a fiber's stack overflow, written by a signal
// handler (only async-signal-safe calls are allowed there), and a hook's
// failure to find the real libc function behind it, which may happen in a
// signal handler or before main. In a forked child, messages go to stderr
// until the child sets a handler of its own: the parent's may need locks
// that threads which do not exist in the child held at the fork.
#pragma once

#include <functional>
#include <string_view>

#include "detail/require_cxx20.h"
#include "detail/visibility.h"

namespace weft {

enum class LogLevel {
  warning,  // weft carries on as documented (weft-dump's server is off)
  error,    // something was lost or is stuck (a posted task threw; fibers outlive shutdown)
  fatal,    // the process ends right after the message (std::abort() or std::terminate())
};

// Receives one message: its text, without a trailing newline (a few lines
// for a report).
using LogHandler = std::function<void(LogLevel level, std::string_view text)>;

// Sends every later message to `handler`; an empty handler restores stderr.
// Safe to call from any thread at any time.
WEFT_API void set_log_handler(LogHandler handler);

// "warning", "error" or "fatal".
WEFT_API std::string_view to_string(LogLevel level) noexcept;

}  // namespace weft
