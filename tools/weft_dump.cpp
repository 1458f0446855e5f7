// weft-dump: jstack for weft fibers. Asks a live process's dump server
// (introspect/dump_server.h) for a snapshot and prints it as text or as JSON; or
// lists this user's weft processes.
// docs/dump.md explains every field.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dump_client.h"
#include "dump_text.h"
#include "dump_top.h"

namespace {

constexpr const char* kUsage =
    "usage: weft-dump <pid> [--json] [--timeout S]   print every worker and fiber of a weft process\n"
    "       weft-dump <pid> --top [--iterations N]   live rates per worker and fiber, every second; q quits\n"
    "       weft-dump --list [--timeout S]           this user's weft processes\n"
    "Exit status: 0 done, 1 the process could not be dumped (see the message), 2 bad arguments.\n";

int usage_error(const std::string& what) {
  std::fprintf(stderr, "weft-dump: %s\n%s", what.c_str(), kUsage);
  return 2;
}

bool parse_pid(const std::string& text, pid_t& pid) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  pid = static_cast<pid_t>(std::stol(text));
  return pid > 0;
}

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

}  // namespace

int main(int argc, char** argv) {
  pid_t pid = 0;
  bool json = false, list = false, top = false;
  long iterations = 0;
  double timeout_seconds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json")
      json = true;
    else if (arg == "--top")
      top = true;
    else if (arg == "--iterations") {
      char* end = nullptr;
      if (i + 1 == argc) return usage_error("--iterations needs a number of frames");
      iterations = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || iterations < 1) return usage_error(std::string("bad --iterations: ") + argv[i]);
    } else if (arg == "--list")
      list = true;
    else if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--timeout") {
      char* end = nullptr;
      if (i + 1 == argc) return usage_error("--timeout needs a number of seconds");
      timeout_seconds = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(timeout_seconds > 0) || timeout_seconds > 3600)
        return usage_error(std::string("bad --timeout: ") + argv[i]);
    } else if (pid == 0 && parse_pid(arg, pid)) {
    } else {
      return usage_error("unexpected argument: " + arg);
    }
  }
  const auto timeout = std::chrono::milliseconds(static_cast<long long>(timeout_seconds * 1000));
  if (list) {
    if (pid != 0 || json || top) return usage_error("--list takes no pid and no other mode");
    return list_processes(timeout);
  }
  if (pid == 0) return usage_error("which process? give its pid");
  if (json && top) return usage_error("--json and --top do not go together");
  if (iterations != 0 && !top) return usage_error("--iterations goes with --top");

  try {
    if (top) return weft::tools::run_top(pid, {.timeout = timeout, .iterations = iterations});
    if (json) {
      // The server's JSON is the document: copied through as it arrives.
      weft::tools::stream_dump(pid, timeout, stdout);
    } else {
      weft::tools::render_dump_text(weft::tools::request_dump(pid, "dump", timeout).snapshot, stdout);
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
