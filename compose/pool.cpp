// The composition root's part of pools and threads: a weft::Pool is built
// with the process's default scheduler (for a pool on fibers that names
// none) and introspect/'s services; a weft::Thread on fibers runs on the
// default scheduler unless it names one. The rest of both is in pool/.
#include <weft/default_scheduler.h>
#include <weft/fiber_list.h>
#include <weft/pool.h>
#include <weft/thread.h>

#include <stdexcept>

#include "../introspect/services.h"
#include "../pool/pool_core.h"

namespace weft {

Pool::Pool(PoolOptions options)
    : core_(std::make_unique<detail::PoolCore>(std::move(options), &default_scheduler, &detail::pool_services())) {}

namespace detail {

Scheduler* thread_scheduler(const ThreadOptions& options) {
  if (options.name.empty())
    throw std::invalid_argument("weft::Thread: the name is empty; a Thread needs one (WEFT_FIBERS selects by it)");
  if (!runs_on_fibers(options.mode, options.name)) return nullptr;
  return options.scheduler != nullptr ? options.scheduler : &default_scheduler();
}

}  // namespace detail
}  // namespace weft
