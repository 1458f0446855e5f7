#include <weft/default_scheduler.h>

#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace weft {

namespace {

unsigned workers_from_environment() {
  Config defaults;
  const char* value = std::getenv("WEFT_WORKERS");
  if (value == nullptr || *value == '\0') return defaults.workers;
  const std::string_view text = value;
  unsigned n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (error != std::errc{} || end != text.data() + text.size() || n < 1 || n > 1024)
    throw std::invalid_argument("weft: WEFT_WORKERS='" + std::string(text) +
                                "' is not a worker count (a whole number from 1 to 1024)");
  return n;
}

Scheduler* start_default() {
  Config config;
  config.workers = workers_from_environment();
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
