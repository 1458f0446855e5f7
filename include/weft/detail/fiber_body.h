// detail::FiberBody: the function that spawn() makes for a fiber's callable
// (include/weft/scheduler.h), which the runtime calls without knowing the
// callable's type.
#pragma once

#include "require_cxx20.h"

namespace weft::detail {

// Runs the callable at `callable` (`run`), then destroys it; with `run`
// false it only destroys it: the fiber ends without having run, because no
// stack could be had for it (SchedulerCore::start_fiber).
using FiberBody = void (*)(void* callable, bool run);

}  // namespace weft::detail
