#include <fnmatch.h>
#include <weft/fiber_list.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace weft {

namespace {

std::string_view trim(std::string_view s) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// fnmatch(3) with no flags: `*` and `?` match any character, `/` and a
// leading `.` too (names are not paths); glibc reads an unclosed `[` or a
// trailing `\` as itself.
bool matches(const std::string& glob, const char* name) noexcept { return ::fnmatch(glob.c_str(), name, 0) == 0; }

// Built by appending: GCC 12 draws a false -Wrestrict from
// `"'" + std::string(...)`, which inserts at the front.
[[noreturn]] void bad_entry(std::string_view spec, std::string_view entry, std::string_view why) {
  std::string message = "weft: WEFT_FIBERS entry '";
  message.append(entry).append("' in '").append(spec).append("': ").append(why);
  message.append(" (expected ';'-separated name:<glob> entries, e.g. 'name:rpc-*;name:db?', or '*')");
  throw std::invalid_argument(message);
}

}  // namespace

FiberList FiberList::parse(std::string_view spec) {
  FiberList list;
  std::string_view rest = spec;
  while (!rest.empty()) {
    const std::size_t end = rest.find(';');
    const std::string_view entry = trim(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    if (entry.empty()) continue;
    if (entry == "*") {
      list.globs_.emplace_back("*");
      continue;
    }
    constexpr std::string_view prefix = "name:";
    if (entry.substr(0, prefix.size()) != prefix) {
      const std::size_t colon = entry.find(':');
      if (colon != std::string_view::npos) {
        std::string why = "'";
        why.append(entry.substr(0, colon + 1)).append("' is not a selector weft knows");
        bad_entry(spec, entry, why);
      }
      bad_entry(spec, entry, "missing 'name:'");
    }
    const std::string glob(trim(entry.substr(prefix.size())));
    if (glob.empty()) bad_entry(spec, entry, "empty name pattern");
    list.globs_.push_back(glob);
  }
  return list;
}

const FiberList& FiberList::from_environment() {
  // Read once, as Wisp reads its -D flags once: a pool's mode is fixed when
  // it is built, and a later setenv() must not make two pools of one name
  // differ. The parse error, if any, is kept and rethrown to every caller.
  struct Parsed {
    FiberList list;
    std::string error;
  };
  static const Parsed parsed = [] {
    Parsed p;
    const char* value = std::getenv("WEFT_FIBERS");
    if (value == nullptr) return p;
    try {
      p.list = parse(value);
    } catch (const std::invalid_argument& e) {
      p.error = e.what();
    }
    return p;
  }();
  if (!parsed.error.empty()) throw std::invalid_argument(parsed.error);
  return parsed.list;
}

bool FiberList::lists(std::string_view name) const {
  if (globs_.empty()) return false;
  const std::string text(name);  // fnmatch reads C strings (a name holding a NUL byte: up to it)
  for (const std::string& glob : globs_)
    if (matches(glob, text.c_str())) return true;
  return false;
}

bool runs_on_fibers(RunMode mode, std::string_view name) {
  switch (mode) {
    case RunMode::threads:
      return false;
    case RunMode::fibers:
      return true;
    case RunMode::by_name:
      break;
  }
  return FiberList::from_environment().lists(name);
}

}  // namespace weft
