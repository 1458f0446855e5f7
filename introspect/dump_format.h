// The wire format of weft-dump: a ProcessSnapshot as one JSON document,
// written from the field tables of introspect/dump_fields.h (which the CLI
// reads it back with). The CLI renders its text from this JSON, so
// `weft-dump <pid>` and `weft-dump <pid> --json` cannot disagree. The schema
// is in docs/dump.md.
#pragma once

#include <weft/snapshot.h>

#include <functional>
#include <string>
#include <string_view>

#include "dump_protocol.h"

namespace weft::detail {

enum class DumpDetail {
  full,     // workers and every fiber
  summary,  // per scheduler only its fiber count (for `weft-dump --list`)
  metrics,  // the counts and the workers, no fibers (for `weft-dump --metrics`)
};

std::string to_json(const ProcessSnapshot& snapshot, DumpDetail detail);

// The same document, handed to `send` in pieces of about 64 KiB as it is
// written, so that a big dump needs no buffer of its size (100,000 fibers
// are ~34 MB: a fresh mapping, and its page faults, for every dump). Once
// `send` returns false it is not called again. False if it ever did.
bool write_json(const ProcessSnapshot& snapshot, DumpDetail detail,
                const std::function<bool(std::string_view piece)>& send);

// {"weft_dump": N, "error": "..."}: what the server answers when it refuses.
std::string error_json(const std::string& message);

}  // namespace weft::detail
