// TEMPORARY stand-in (see io/temp_stand_in.cpp) for the offload branch's
// weft::blocking: only the internal entry the hooks need.
#pragma once

#include "detail/require_cxx20.h"

namespace weft::detail {

// Runs call(arg) on a helper thread and parks the fiber until it returns;
// `call` must not throw.
void run_blocking(void (*call)(void*) noexcept, void* arg);

}  // namespace weft::detail
