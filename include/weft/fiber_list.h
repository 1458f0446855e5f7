// weft::FiberList: which named pools and threads run as fibers, Wisp's
// `threadAsWisp.white` list under weft's name. The process reads it once
// from the environment variable WEFT_FIBERS:
//
//   WEFT_FIBERS='name:rpc-*;name:DubboServerHandler*' ./server
//
// Entries are separated by ';' and each is `name:<glob>`, a fnmatch(3)
// pattern: `*` matches any run of characters, `?` exactly one, `[ab]` and
// `[a-z]` one of a set (`[!ab]` one outside it), and `\` makes the next
// character literal; `*` alone (or `name:*`) lists every name. Blanks around entries are ignored, and so are empty
// entries. A weft::Pool or weft::Thread whose name is listed runs on fibers; every other one runs on plain threads, so
// an unset or empty WEFT_FIBERS turns fibers off (docs/pools.md).
//
//   weft::FiberList list = weft::FiberList::parse("name:rpc-*");
//   list.lists("rpc-handler");  // true
//   list.lists("db");           // false
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "detail/require_cxx20.h"
#include "detail/visibility.h"

namespace weft {

class WEFT_API FiberList {
 public:
  // The empty list: nothing runs on fibers.
  FiberList() = default;

  // Throws std::invalid_argument naming the bad entry and what a good one
  // looks like: an entry without `name:` (`class:` and `package:` are
  // Java's and mean nothing here), or one with an empty glob.
  static FiberList parse(std::string_view spec);

  // WEFT_FIBERS, parsed on the first call and kept for the process's life.
  // A malformed value throws std::invalid_argument on every call, so each
  // pool or thread that consults it reports the mistake.
  static const FiberList& from_environment();

  bool lists(std::string_view name) const;
  bool empty() const noexcept { return globs_.empty(); }
  // The globs as parsed, for messages and weft-dump.
  const std::vector<std::string>& globs() const noexcept { return globs_; }

 private:
  std::vector<std::string> globs_;
};

// How a weft::Pool or weft::Thread picks between fibers and plain threads.
enum class RunMode {
  by_name,  // fibers if WEFT_FIBERS lists the name, else threads (the default)
  threads,  // always plain threads, whatever WEFT_FIBERS says
  fibers,   // always fibers, whatever WEFT_FIBERS says
};

// The decision for `name`: `mode` itself unless it is by_name, else
// FiberList::from_environment().lists(name).
WEFT_API bool runs_on_fibers(RunMode mode, std::string_view name);

}  // namespace weft
