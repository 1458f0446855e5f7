// Command-line parsing shared by the whole-program benchmarks.
#pragma once

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

namespace weft::bench {

// A whole decimal number in [min, max] from `text`; anything else calls
// `usage` (which prints the program's usage and exits 2) with a message
// naming `option`.
template <class T>
T parse_count(const char* text, const char* option, T min, T max, void (*usage)(const char*)) {
  T value{};
  const char* end = text + std::strlen(text);
  const auto [ptr, ec] = std::from_chars(text, end, value);
  if (ec != std::errc() || ptr != end || value < min || value > max) {
    usage(
        (std::string(option) + " needs an integer from " + std::to_string(min) + " to " + std::to_string(max)).c_str());
    std::exit(2);
  }
  return value;
}

}  // namespace weft::bench
