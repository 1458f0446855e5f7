// Extensions: per-scheduler services of the layers above sched/ (io/'s
// blocking pool) that a SchedulerCore keeps and destroys without including
// them, so that the include arrows keep pointing down.
//
// An extension is made on first use and lives until the scheduler is
// destroyed: after weft-dump has stopped seeing the scheduler (which may
// read extensions meanwhile), and before the workers, queues and idle
// protocol are gone (which an extension's threads may still be calling on
// their way out, e.g. ready() after a last unpark).
#pragma once

#include <cstddef>

namespace weft::detail {

enum class ExtensionKind : unsigned { blocking_pool, file_ring, count };

class Extension {
 public:
  Extension() = default;
  Extension(const Extension&) = delete;
  Extension& operator=(const Extension&) = delete;
  virtual ~Extension() = default;
};

}  // namespace weft::detail
