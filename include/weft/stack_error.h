// weft::StackError: what spawn throws when a fiber's stack cannot be had.
#pragma once

#include <stdexcept>

#include "detail/require_cxx20.h"
#include "detail/visibility.h"

namespace weft {

// Thrown by spawn when the stack cannot be mapped: out of memory, or out of
// mappings (vm.max_map_count). The message says which and what to tune.
class WEFT_API StackError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace weft
