// Which frames of a parked fiber's stack weft-dump prints, and how it names
// them (docs/dump.md, "Under each fiber"). As jstack and Go's goroutine
// dump do, a stack starts with the public call the fiber is in
// (`weft::BlockingQueue<int>::take`, `read`, `weft::this_fiber::sleep`),
// then the user's own frames;
// weft's internals (the primitive's private steps, park(), the fiber's
// entry) are left out, and template arguments are shortened for a reader
// (`std::chrono::steady_clock::time_point`, not its 120-character
// spelling). `--all-frames` prints every frame by its full name instead.
#pragma once

#include <weft/snapshot.h>

#include <string>
#include <string_view>
#include <vector>

namespace weft::tools {

struct ShownFrame {
  std::string function;      // as printed: shortened, or the address when unknown
  const FrameSymbol* where;  // its file:line or module+offset; null: unknown
  std::uintptr_t address;
};

// The frames to print for `fiber`, innermost first.
std::vector<ShownFrame> frames_to_show(const FiberSnapshot& fiber, const ProcessSnapshot& dump, bool all_frames);

// `name` for a reader: standard aliases for what the compiler spells out
// (std::string, std::chrono's durations and time points), clone suffixes
// dropped, long template argument lists as <...>.
std::string shorten_function_name(std::string_view name);

}  // namespace weft::tools
