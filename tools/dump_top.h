// `weft-dump <pid> --top`: a live view of a weft process, refreshed every
// second as in top: per worker and per fiber, the rates of their counters,
// busiest first. docs/dump.md describes the columns.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include "dump_text.h"

namespace weft::tools {

struct TopOptions {
  std::chrono::milliseconds timeout{5000};   // per dump request
  std::chrono::milliseconds interval{1000};  // between frames
  long iterations = 0;                       // frames to show; 0: until `q`
};

// Runs the view; returns weft-dump's exit status. Throws DumpUnavailable
// (and DumpFormatError) as request_dump does.
int run_top(pid_t pid, const TopOptions& options);

// One frame from two dumps `seconds` apart, at most `rows` lines (the
// header and the worker rows come first; fibers fill what is left).
std::string render_top_frame(const ProcessSnapshot& previous, const ProcessSnapshot& current, double seconds, int rows);

}  // namespace weft::tools
