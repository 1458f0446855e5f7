// The plain threads weft made (pool/thread_registry.h) as weft-dump shows
// them: name, tid, the kernel's state, the running task's time, and, for
// one asleep in a system call, the call and where it made it.
#pragma once

#include <weft/snapshot.h>

#include <vector>

namespace weft::detail {

std::vector<ThreadSnapshot> snapshot_threads();

}  // namespace weft::detail
