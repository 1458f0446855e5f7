// weft::default_scheduler(): the process-wide Scheduler that fiber pools
// and fiber threads run on unless their options name another one.
//
//   weft::Pool pool{{.name = "rpc-handler", .threads = 64}};  // listed in WEFT_FIBERS
//   // runs on default_scheduler(), started by this first use
//
// weft's schedulers are otherwise plain objects (there is no global one),
// but the switch by name has to work without code changes, and code that
// only names a pool cannot hand it a scheduler: so, as Go's runtime does,
// the process gets one, started on first use, with WEFT_WORKERS workers
// (default: one per core), at most WEFT_MAX_BLOCKING_THREADS helpers for
// weft::blocking and the resolver (default 512), and named "weft-default"
// for weft-dump.
//
// Lifetime: it is never destroyed. Pools and threads may be static objects
// whose destructors run at exit, in any order relative to a function-local
// static, and they need the workers to finish their fibers; a scheduler
// destroyed at exit would also wait for fibers parked forever (a detached
// fiber on a socket). So its workers simply stop with the process, as a
// Go program's goroutines do when main returns.
#pragma once

#include "detail/require_cxx20.h"
#include "detail/visibility.h"
#include "scheduler.h"

namespace weft {

// Starts it on the first call (thread-safe). Throws std::invalid_argument
// naming the variable if WEFT_WORKERS is set but is not a whole number from
// 1 to 1024, or WEFT_MAX_BLOCKING_THREADS one from 1 to 65536.
WEFT_API Scheduler& default_scheduler();

}  // namespace weft
