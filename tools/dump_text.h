// weft-dump's text: a jstack-like rendering of the dump server's JSON
// (schema in docs/dump.md). The JSON is read back, by the field tables of
// introspect/dump_fields.h, into the ProcessSnapshot the server wrote it
// from; rendering from what was received, never from a process's own
// structs, keeps the text and `--json` telling the same story.
#pragma once

#include <weft/snapshot.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

#include "introspect/dump_fields.h"

namespace weft::tools {

using DumpFormatError = detail::dump::DumpFormatError;

// The server's {"weft_dump": N, "error": "..."}: its reason, printable.
struct DumpRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Reads the server's answer, a full dump or a summary; throws DumpRefused
// for a refusal, DumpFormatError if it is not valid JSON (nor UTF-8), is of
// another schema version, or lacks a field. Unknown fields are skipped.
ProcessSnapshot read_dump(std::string_view json);

// The whole dump: a header, then per scheduler its workers and its fibers
// (by id) in Wisp's line shape. With `out`, written there in 64 KiB pieces
// as it is made (and the result is empty): 100,000 fibers are ~20 MB.
// What to show.
struct TextOptions {
  // Every frame of a stack by its full name, instead of the public call and
  // the user's frames, shortened (tools/dump_frames.h).
  bool all_frames = false;
};
std::string render_dump_text(const ProcessSnapshot& dump, std::FILE* out = nullptr, const TextOptions& options = {});

// "12.4 ms" below ten seconds, "42.0 s" above.
std::string format_duration_ms(double ms);

// `text` safe to print on a terminal: control bytes (ESC, CR, LF, ...), DEL
// and the C1 controls (U+0080-U+009F) become \xNN, the bidirectional
// formatting controls (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F,
// U+061C) \uNNNN, a backslash \\ and a double quote \"; so a name can
// neither forge dump lines (nor end its own quotes), reorder what a
// terminal shows, nor drive the terminal. Other valid UTF-8 (the server's
// JSON has nothing else) passes.
std::string printable(std::string_view text);
// The same, appended to `out`.
void append_printable(std::string& out, std::string_view text);

// "0x7f22a0c0".
std::string hex_address(const void* address);

}  // namespace weft::tools
