// weft-dump: jstack for weft fibers. Asks a live process's dump server
// (introspect/dump_server.h) for a snapshot and prints it as text or as JSON; or
// lists this user's weft processes.
// docs/dump.md explains every field.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dump_client.h"
#include "dump_metrics.h"
#include "dump_text.h"
#include "dump_top.h"

#if __has_include(<weft/version.h>)
#include <weft/version.h>
#endif

namespace {

// The weft this weft-dump came with: the generated include/weft/version.h
// (only its macro: weft-dump links no part of libweft), else meson's
// project version (tools/meson.build).
#ifdef WEFT_VERSION_STRING
constexpr const char* kVersion = WEFT_VERSION_STRING;
#else
constexpr const char* kVersion = WEFT_DUMP_VERSION;
#endif

int list_processes(std::chrono::milliseconds timeout) {
  std::printf("%-8s %-16s %-10s %-8s %s\n", "PID", "NAME", "SCHEDULERS", "FIBERS", "SCHEDULER NAMES");
  for (const pid_t pid : weft::tools::find_dump_processes()) {
    try {
      const weft::ProcessSnapshot process = weft::tools::request_dump(pid, "summary", timeout).snapshot;
      std::uint64_t fibers = 0;
      std::string names;
      for (const auto& s : process.schedulers) {
        fibers += s.fiber_count;
        names += (names.empty() ? "" : ", ") + weft::tools::printable(s.name);
      }
      std::printf("%-8d %-16s %-10zu %-8llu %s\n", pid, weft::tools::printable(process.name).c_str(),
                  process.schedulers.size(), static_cast<unsigned long long>(fibers), names.c_str());
      // One line per pool under its process.
      for (const auto& p : process.pools)
        std::printf("%-8s pool \"%s\" %s size=%u queued=%llu running=%llu completed=%llu\n", "",
                    weft::tools::printable(p.name).c_str(), p.mode.c_str(), p.size,
                    static_cast<unsigned long long>(p.queued), static_cast<unsigned long long>(p.running),
                    static_cast<unsigned long long>(p.completed));
    } catch (const std::exception& e) {
      // A process that cannot answer is still worth a line: it is the one
      // an operator is looking for.
      std::printf("%-8d %-16s (%s)\n", pid, "?", e.what());
    }
  }
  return 0;
}

struct Arguments {
  pid_t pid = 0;
  bool json = false, list = false, top = false, metrics = false, all_frames = false;
  double trace_seconds = 0;
  long iterations = 0;
  double timeout_seconds = 5;
};

// A number of seconds, before CLI::Range looks: "nan" passes a range
// check, as every comparison with NaN is false.
const CLI::Validator kANumber(
    [](std::string& text) {
      return std::isnan(std::strtod(text.c_str(), nullptr)) ? "Value " + text + " is not a number" : std::string();
    },
    "");

// The command line, as CLI11 reads it: `--timeout 3` and `--timeout=3`
// alike, generated help. A bad one throws CLI::ParseError.
void describe_arguments(CLI::App& app, Arguments& a) {
  app.description(
      "weft-dump: prints every worker and fiber of a live weft process, as jstack does for a JVM "
      "(docs/dump.md).");
  app.footer("Exit status: 0 done, 1 the process could not be dumped (see the message), 2 bad arguments.");
  app.set_version_flag("--version", std::string("weft-dump (weft) ") + kVersion);
  app.add_option("pid", a.pid, "the process to dump")->check(CLI::Range(1, 999'999'999));
  CLI::Option* json = app.add_flag("--json", a.json, "the same snapshot as one JSON document");
  CLI::Option* top = app.add_flag("--top", a.top, "live rates per worker and fiber, every second; q quits");
  app.add_option("--iterations", a.iterations, "with --top: stop after N frames")
      ->check(CLI::Range(1L, 1'000'000'000L))
      ->needs(top);
  CLI::Option* list = app.add_flag("--list", a.list, "this user's weft processes");
  CLI::Option* metrics =
      app.add_flag("--metrics", a.metrics, "the process's counters in the OpenMetrics (Prometheus) text format");
  CLI::Option* trace =
      app.add_option("--trace", a.trace_seconds,
                     "record a timeline for SECONDS and print it as Chrome Trace Event JSON (ui.perfetto.dev)")
          ->check(kANumber)
          ->check(CLI::Range(0.001, 60.0));
  app.add_flag("--all-frames", a.all_frames,
               "every frame of each stack by its full name (weft's own included), not only the public call and "
               "yours");
  app.add_option("--timeout", a.timeout_seconds, "give up after S seconds (default 5)")
      ->check(kANumber)
      ->check(CLI::Range(0.001, 3600.0));
  json->excludes(top)->excludes(metrics)->excludes(trace);
  top->excludes(metrics)->excludes(trace);
  metrics->excludes(trace);
  list->excludes(json)->excludes(top)->excludes(metrics)->excludes(trace);
}

// Bad arguments: what was wrong, then the usage, on stderr; exit status 2.
int usage_error(const CLI::App& app, const std::string& what) {
  std::fprintf(stderr, "weft-dump: %s\n%s", what.c_str(), app.help().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app;
  Arguments a;
  describe_arguments(app, a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(app, e.what());
  }
  const auto timeout = std::chrono::milliseconds(static_cast<long long>(a.timeout_seconds * 1000));
  if (a.list) {
    if (a.pid != 0) return usage_error(app, "--list takes no pid");
    return list_processes(timeout);
  }
  if (a.pid == 0) return usage_error(app, "which process? give its pid");

  const pid_t pid = a.pid;
  try {
    if (a.top) return weft::tools::run_top(pid, {.timeout = timeout, .iterations = a.iterations});
    if (a.trace_seconds > 0) {
      const auto duration = std::chrono::milliseconds(static_cast<long long>(a.trace_seconds * 1000));
      weft::tools::stream_trace(pid, duration, timeout, stdout);
    } else if (a.metrics) {
      const std::string text = weft::tools::render_metrics(weft::tools::request_dump(pid, "metrics", timeout).snapshot);
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else if (a.json) {
      // The server's JSON is the document: copied through as it arrives.
      weft::tools::stream_dump(pid, timeout, stdout);
    } else {
      weft::tools::render_dump_text(weft::tools::request_dump(pid, "dump", timeout).snapshot, stdout,
                                    {.all_frames = a.all_frames});
    }
  } catch (const weft::tools::DumpUnavailable& e) {
    std::fprintf(stderr, "weft-dump: %s\n", e.what());
    return 1;
  } catch (const weft::tools::DumpFormatError& e) {
    std::fprintf(stderr, "weft-dump: process %d sent a dump this weft-dump cannot read: %s\n", pid, e.what());
    return 1;
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}
