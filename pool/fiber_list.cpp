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

// Built by appending: GCC 12 draws a false -Wrestrict from
// `"'" + std::string(...)`, which inserts at the front.
[[noreturn]] void bad_entry(std::string_view spec, std::string_view entry, std::string_view why) {
  std::string message = "weft: WEFT_FIBERS entry '";
  message.append(entry).append("' in '").append(spec).append("': ").append(why);
  message.append(" (expected ';'-separated name:<glob> entries, e.g. 'name:rpc-*;name:db?', or '*')");
  throw std::invalid_argument(message);
}

}  // namespace

bool glob_match(std::string_view glob, std::string_view text) noexcept {
  // Iterative matching with one backtrack point, the last `*` seen: on a
  // mismatch that star absorbs one more character. Linear in practice and
  // never exponential, unlike the recursive form.
  std::size_t g = 0, t = 0;
  std::size_t star = std::string_view::npos, star_text = 0;
  while (t < text.size()) {
    if (g < glob.size() && (glob[g] == '?' || glob[g] == text[t])) {
      ++g;
      ++t;
    } else if (g < glob.size() && glob[g] == '*') {
      star = g++;
      star_text = t;
    } else if (star != std::string_view::npos) {
      g = star + 1;
      t = ++star_text;
    } else {
      return false;
    }
  }
  while (g < glob.size() && glob[g] == '*') ++g;
  return g == glob.size();
}

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
    const std::string_view glob = trim(entry.substr(prefix.size()));
    if (glob.empty()) bad_entry(spec, entry, "empty name pattern");
    list.globs_.emplace_back(glob);
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
  for (const std::string& glob : globs_)
    if (glob_match(glob, name)) return true;
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
