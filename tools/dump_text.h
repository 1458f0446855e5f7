// weft-dump's text: a jstack-like rendering of the dump server's JSON
// (schema in docs/dump.md). Rendering from the JSON, never from the
// snapshot structs, keeps the text and `--json` telling the same story.
#pragma once

#include <string>

#include "json.h"

namespace weft::tools {

// The whole dump: a header, then per scheduler its workers and its fibers
// in Wisp's line shape. Throws JsonError if the document lacks a field.
std::string render_dump_text(const JsonValue& dump);

// "12.4 ms" below ten seconds, "42.0 s" above.
std::string format_duration_ms(double ms);

}  // namespace weft::tools
