// Extensions: per-scheduler parts of the layers above sched/ (io/'s blocking
// pool) that a SchedulerCore keeps and destroys without knowing what they
// are, so that the arrows keep pointing down. The composition root
// (compose/) makes them with the core (SchedulerParts); their own layer
// finds them again by type (SchedulerCore::find_extension).
//
// An extension lives until the scheduler is destroyed: after weft-dump has
// stopped seeing the scheduler (which may read extensions meanwhile), and
// before the workers, queues and idle protocol are gone (which an
// extension's threads may still be calling on their way out, e.g. ready()
// after a last unpark).
#pragma once

namespace weft::detail {

class Extension {
 public:
  Extension() = default;
  Extension(const Extension&) = delete;
  Extension& operator=(const Extension&) = delete;
  virtual ~Extension() = default;
};

}  // namespace weft::detail
