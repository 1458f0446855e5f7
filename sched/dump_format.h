// The wire format of weft-dump: a ProcessSnapshot as one JSON document.
// The CLI renders its text from this JSON, so `weft-dump <pid>` and
// `weft-dump <pid> --json` cannot disagree. The schema is in docs/dump.md;
// bump kDumpFormatVersion when a field changes meaning or goes away.
#pragma once

#include <string>

#include "snapshot.h"

namespace weft::detail {

constexpr int kDumpFormatVersion = 1;

enum class DumpDetail {
  full,     // workers and every fiber
  summary,  // per scheduler only its fiber count (for `weft-dump --list`)
};

std::string to_json(const ProcessSnapshot& snapshot, DumpDetail detail);

// {"weft_dump": 1, "error": "..."}: what the server answers when it refuses.
std::string error_json(const std::string& message);

}  // namespace weft::detail
