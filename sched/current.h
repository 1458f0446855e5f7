// What code running in a fiber asks about where it runs: sync/, io/ and
// hooks/ include this instead of worker.h. Each answer is read afresh: a
// fiber may resume on another worker after any switch.
#pragma once

#include "../runtime/fiber_control.h"  // FiberControl, current_fiber()

namespace weft::detail {

class Worker;

// The worker whose thread is calling, or null on a plain thread. Never
// cached across a switch: a fiber may resume on another worker.
Worker* current_worker() noexcept;

// Whether sysmon asked the calling thread's worker to preempt the fiber it
// runs (sched/sysmon.h); false on a plain thread. checkpoint_slow() acts on
// it (include/weft/detail/checkpoint.h).
bool preempt_requested_here() noexcept;

// The running fiber's pin bookkeeping (this_fiber::pin() and the hooks'
// ParkScope): the first pin binds it to this worker, so that a spare does
// not retire under it; the last, made on the same worker (a pinned fiber
// cannot move), unbinds it.
void pin_current(FiberControl& fiber) noexcept;
void unpin_current(FiberControl& fiber) noexcept;

}  // namespace weft::detail
