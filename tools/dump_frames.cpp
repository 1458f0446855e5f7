#include "dump_frames.h"

#include <array>
#include <utility>

#include "dump_text.h"
#include "introspect/dump_fields.h"

namespace weft::tools {
namespace {

// What the compiler spells out, and what a reader writes.
constexpr std::array<std::pair<std::string_view, std::string_view>, 12> kAliases{{
    {"std::chrono::time_point<std::chrono::_V2::steady_clock, std::chrono::duration<long, std::ratio<1l, "
     "1000000000l> > >",
     "std::chrono::steady_clock::time_point"},
    {"std::chrono::time_point<std::chrono::_V2::system_clock, std::chrono::duration<long, std::ratio<1l, "
     "1000000000l> > >",
     "std::chrono::system_clock::time_point"},
    {"std::chrono::duration<long, std::ratio<1l, 1000000000l> >", "std::chrono::nanoseconds"},
    {"std::chrono::duration<long, std::ratio<1l, 1000000l> >", "std::chrono::microseconds"},
    {"std::chrono::duration<long, std::ratio<1l, 1000l> >", "std::chrono::milliseconds"},
    {"std::chrono::duration<long, std::ratio<1l, 1l> >", "std::chrono::seconds"},
    {"std::ratio<1l, 1000000000l>", "std::nano"},
    {"std::ratio<1l, 1000000l>", "std::micro"},
    {"std::ratio<1l, 1000l>", "std::milli"},
    {"std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >", "std::string"},
    {"std::basic_string_view<char, std::char_traits<char> >", "std::string_view"},
    {"std::__cxx11::", "std::"},
}};

// A template argument list longer than this is shown as <...>.
constexpr std::size_t kLongArguments = 48;

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

constexpr std::string_view kAnonymous = "(anonymous namespace)";

// Walks `name` outside template arguments, braces (lambdas) and
// "(anonymous namespace)", calling `at(i, c)` for each character at depth
// 0 until it returns true; the index where it did, or npos.
template <class At>
std::size_t scan_top_level(std::string_view name, At&& at) {
  int depth = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name.compare(i, kAnonymous.size(), kAnonymous) == 0) {
      i += kAnonymous.size() - 1;
      continue;
    }
    const char c = name[i];
    if (c == '<' || c == '{') ++depth;
    if (c == '>' || c == '}') --depth;
    if (depth == 0 && at(i, c)) return i;
  }
  return std::string_view::npos;
}

// Up to the parameter list: "weft::f<int>(int) const" -> "weft::f<int>".
std::string_view without_parameters(std::string_view name) {
  return name.substr(0, scan_top_level(name, [](std::size_t, char c) { return c == '('; }));
}

// The name without a return type: "void weft::f<int>(int)" -> "weft::f<int>(int)".
std::string_view qualified(std::string_view name) {
  std::size_t start = 0;
  scan_top_level(name, [&](std::size_t i, char c) {
    if (c == ' ') start = i + 1;
    return c == '(';
  });
  return name.substr(start);
}

// "weft::BlockingQueue<int>::remove(...)" -> "weft::BlockingQueue<int>",
// the scope of the function; "" for a function of no namespace.
std::string_view scope_of(std::string_view name) {
  name = without_parameters(name);
  std::size_t last = std::string_view::npos;
  scan_top_level(name, [&](std::size_t i, char c) {
    if (c == ':' && i + 1 < name.size() && name[i + 1] == ':') last = i;
    return false;
  });
  return last == std::string_view::npos ? std::string_view{} : name.substr(0, last);
}

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

bool in_libweft(const FrameSymbol& s) {
  const std::size_t slash = s.module.rfind('/');
  return starts_with(std::string_view(s.module).substr(slash == std::string::npos ? 0 : slash + 1), "libweft.");
}

// weft's own: a function of namespace weft (inlined into the user's
// binary or not), or anything in libweft (its hooks: read, poll, ...).
bool is_weft(const FrameSymbol* s) {
  if (s == nullptr) return false;
  const std::string_view name = qualified(s->function);
  return starts_with(name, "weft::") || name == "weft_context_start" || in_libweft(*s);
}

// weft's internals, which a reader of the dump need not see: weft::detail,
// anonymous namespaces in libweft, the context switch.
bool is_internal(const FrameSymbol* s) {
  if (s == nullptr) return false;
  const std::string_view name = qualified(s->function);
  if (starts_with(name, "weft::detail::") || starts_with(name, "weft::(anonymous namespace)") ||
      name == "weft_context_start")
    return true;
  // In libweft, a C name is a hook (a public call); any other that is not
  // weft's public API is internal.
  return in_libweft(*s) && name.find("::") != std::string_view::npos && !starts_with(name, "weft::");
}

const FrameSymbol* symbol_at(const ProcessSnapshot& dump, std::uintptr_t address) {
  const auto it = dump.symbols.find(address);
  return it == dump.symbols.end() || it->second.function.empty() ? nullptr : &it->second;
}

ShownFrame frame(const ProcessSnapshot& dump, std::uintptr_t address, std::string function) {
  const auto it = dump.symbols.find(address);
  return {std::move(function), it == dump.symbols.end() ? nullptr : &it->second, address};
}

// The public call a fiber is parked in, from the leading run of weft
// frames [0, run): the primitive's class with the operation it reports
// (weft::BlockingQueue<int> + "take"), which the frames cannot show when
// the public method was inlined into a private one; else the outermost
// frame of the run that is not internal (a hook, weft::this_fiber::...).
ShownFrame public_call(const FiberSnapshot& fiber, const ProcessSnapshot& dump, std::size_t run) {
  const std::string& kind = fiber.wait_kind;
  const std::string& operation = fiber.wait_operation;
  if (starts_with(kind, "weft::") && !operation.empty()) {
    // The outermost frame of the primitive's scope: itself, if its name
    // is the operation's (weft::Fiber::join, weft::this_fiber::sleep_for);
    // else the scope with the operation (weft::BlockingQueue<int>::take,
    // whose take() was inlined into remove()).
    std::size_t in_scope = run;
    for (std::size_t i = run; i-- > 0;) {
      const FrameSymbol* s = symbol_at(dump, fiber.stack[i]);
      if (s == nullptr) continue;
      const std::string_view name = without_parameters(qualified(s->function));
      const std::string_view scope = scope_of(name);
      if (scope != kind && !(starts_with(scope, kind) && scope.size() > kind.size() && scope[kind.size()] == '<'))
        continue;
      if (starts_with(name.substr(scope.size() + 2), operation))
        return frame(dump, fiber.stack[i], shorten_function_name(name));
      if (in_scope == run) in_scope = i;
    }
    if (in_scope != run) {
      const std::string_view scope = scope_of(qualified(symbol_at(dump, fiber.stack[in_scope])->function));
      return frame(dump, fiber.stack[in_scope], shorten_function_name(scope) + "::" + operation);
    }
  }
  std::size_t chosen = run;
  for (std::size_t i = run; i-- > 0;)
    if (!is_internal(symbol_at(dump, fiber.stack[i]))) {
      chosen = i;
      break;
    }
  // Only internal frames: the public function was inlined into the
  // caller (this_fiber::sleep_for), or the wait is the hooks' own
  // (std::mutex's lock, reached through pthread_mutex_lock's hook, whose
  // contended path is libweft's), so the wait site names the call.
  if (chosen == run && !operation.empty()) return frame(dump, fiber.stack[run - 1], kind + "::" + operation);
  if (chosen == run) chosen = run - 1;
  const FrameSymbol* s = symbol_at(dump, fiber.stack[chosen]);
  const std::string name = s == nullptr ? detail::dump::hex(fiber.stack[chosen])
                                        : shorten_function_name(without_parameters(qualified(s->function)));
  return frame(dump, fiber.stack[chosen], name);
}

}  // namespace

std::string shorten_function_name(std::string_view name) {
  std::string out(name);
  for (const auto& [from, to] : kAliases) replace_all(out, from, to);
  replace_all(out, "std::_V2::", "std::");
  // GCC's clones: " [clone .isra.0]", " [clone .constprop.0]".
  for (std::size_t at = out.find(" [clone "); at != std::string::npos; at = out.find(" [clone ", at)) {
    const std::size_t end = out.find(']', at);
    if (end == std::string::npos) break;
    out.erase(at, end + 1 - at);
  }
  // Long template argument lists, outermost first.
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] != '<' || (i >= 8 && out.compare(i - 8, 8, "operator") == 0)) continue;
    int depth = 0;
    std::size_t j = i;
    for (; j < out.size(); ++j) {
      if (out[j] == '<') ++depth;
      if (out[j] == '>' && --depth == 0) break;
    }
    if (j == out.size()) break;
    if (j - i - 1 > kLongArguments) out.replace(i + 1, j - i - 1, "...");
  }
  return out;
}

std::vector<ShownFrame> frames_to_show(const FiberSnapshot& fiber, const ProcessSnapshot& dump, bool all_frames) {
  std::vector<ShownFrame> shown;
  const auto named = [&](std::uintptr_t address) {
    const FrameSymbol* s = symbol_at(dump, address);
    return s == nullptr ? detail::dump::hex(address) : s->function;
  };
  if (all_frames) {
    for (const std::uintptr_t address : fiber.stack) shown.push_back(frame(dump, address, named(address)));
    return shown;
  }
  std::size_t run = 0;
  while (run < fiber.stack.size() && is_weft(symbol_at(dump, fiber.stack[run]))) ++run;
  if (run > 0) shown.push_back(public_call(fiber, dump, run));
  for (std::size_t i = run; i < fiber.stack.size(); ++i) {
    const FrameSymbol* s = symbol_at(dump, fiber.stack[i]);
    if (is_internal(s)) continue;
    shown.push_back(
        frame(dump, fiber.stack[i], s == nullptr ? named(fiber.stack[i]) : shorten_function_name(s->function)));
  }
  return shown;
}

}  // namespace weft::tools
