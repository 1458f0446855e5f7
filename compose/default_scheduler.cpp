#include <weft/default_scheduler.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace weft {

namespace {

// The whole number in environment variable `name`, from `min` to `max`, or
// `fallback` when it is unset or empty; throws naming the variable if it is
// anything else.
unsigned count_from_environment(const char* name, unsigned fallback, unsigned min, unsigned max, const char* what) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  const std::string_view text = value;
  unsigned n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (error != std::errc{} || end != text.data() + text.size() || n < min || n > max)
    throw std::invalid_argument("weft: " + std::string(name) + "='" + std::string(text) + "' is not " + what +
                                " (a whole number from " + std::to_string(min) + " to " + std::to_string(max) + ")");
  return n;
}

Scheduler* start_default() {
  Config config;
  config.workers = count_from_environment("WEFT_WORKERS", config.workers, 1, 1024, "a worker count");
  config.max_blocking_threads = count_from_environment("WEFT_MAX_BLOCKING_THREADS", config.max_blocking_threads, 1,
                                                       65536, "a limit of blocking helper threads");
  // At least the workers: equal turns spare threads off (docs/sysmon.md).
  config.max_threads = count_from_environment("WEFT_MAX_THREADS", std::max(config.max_threads, config.workers),
                                              config.workers, 1'000'000, "a thread limit");
  config.name = "weft-default";
  // Deliberately leaked (see the header): reachable from the static pointer
  // below, so LeakSanitizer does not count it.
  return new Scheduler(config);
}

}  // namespace

Scheduler& default_scheduler() {
  // A function-local static pointer: initialised once, thread-safe, and
  // never destroyed, because what it points to is never deleted.
  static Scheduler* const scheduler = start_default();
  return *scheduler;
}

}  // namespace weft
