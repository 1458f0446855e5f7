// weft::StackError: what join() rethrows (or spawn throws) when a fiber's
// stack cannot be had.
#pragma once

#include <stdexcept>

#include "detail/require_cxx20.h"
#include "detail/visibility.h"

namespace weft {

// A fiber's stack could not be mapped: out of memory, or out of mappings
// (vm.max_map_count). The message says which and what to tune. A fiber
// takes its stack when it first runs: it then ends without running, and
// join() rethrows this. Spawn throws it for a fiber that takes its stack at
// spawn: one with a SpawnOptions::stack_size other than Config::stack_size,
// or a callable larger than 64 bytes (docs/usage.md, "Errors").
class WEFT_API StackError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace weft
