// Command lines of the whole-program benchmarks, on CLI11 (libcli11-dev):
// `--opt value` and `--opt=value`, help generated from the options
// (`--help`, on stdout, exit status 0), and exit status 2 with a message on
// stderr for a bad command line.
//
//   CLI::App app{"PingPong: ...", "pingpong"};
//   weft::bench::add_count(app, "--rounds", rounds, std::uint64_t{1}, std::uint64_t{1'000'000'000'000}, "round trips");
//   app.add_flag("--json", json, "print one JSON array on stdout");
//   weft::bench::parse(app, argc, argv);
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace weft::bench {

// Counts are decimal, as they always were here: CLI11 alone would read
// `010` as octal 8 and take `0x10`.
inline const CLI::Validator decimal(
    [](std::string& text) -> std::string {
      if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
        return "needs a whole number in decimal, not '" + text + "'";
      text.erase(0, std::min(text.find_first_not_of('0'), text.size() - 1));  // 007 is 7
      return {};
    },
    "", "decimal");

// An option taking a count in [min, max], shown with its default in --help.
template <class T>
CLI::Option* add_count(CLI::App& app, const std::string& name, T& value, T min, T max, const std::string& help) {
  return app.add_option(name, value, help)->transform(decimal)->check(CLI::Range(min, max))->capture_default_str();
}

// Parses the command line: --help prints the help and exits 0; a bad
// command line prints CLI11's message and exits 2.
inline void parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    std::exit(2);
  }
}

// A command line that parses but does not make sense (an option given for
// a mode it does not apply to): the message, and exit status 2.
[[noreturn]] inline void usage_error(const CLI::App& app, const std::string& message) {
  std::fprintf(stderr, "%s: %s\nRun with --help for more information.\n", app.get_name().c_str(), message.c_str());
  std::exit(2);
}

}  // namespace weft::bench
