// weft::Scheduler: a pool of worker threads that run fibers.
//
//   weft::Config cfg;
//   cfg.workers = 2;
//   weft::Scheduler sched{cfg};
//   weft::Fiber f = sched.spawn([] { weft::this_fiber::sleep_for(1ms); });
//   weft::Fiber g = sched.spawn({.name = "rpc-3"}, [] { ... });
//   f.join();
//   g.join();
//
// Schedulers are independent objects: a process may have several, and
// none is global except the one fiber pools use when given none
// (default_scheduler.h). The destructor waits for every fiber (see
// Config::shutdown_grace and ShutdownPolicy). spawn() works from any
// thread: a fiber, a worker, or a plain thread. Inside a fiber,
// weft::spawn() spawns on the fiber's own scheduler.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <new>
#include <string_view>
#include <type_traits>
#include <utility>

#include "config.h"
#include "detail/fiber_body.h"
#include "detail/require_cxx20.h"
#include "detail/user_call.h"
#include "detail/visibility.h"
#include "fiber.h"
#include "snapshot.h"

namespace weft {

struct SpawnOptions;

namespace detail {
class SchedulerCore;
struct FiberControl;
WEFT_API FiberControl* prepare_fiber(SchedulerCore& core, const SpawnOptions& options, std::size_t size,
                                     std::size_t align);
WEFT_API void abandon_fiber(SchedulerCore& core, FiberControl* fiber) noexcept;
WEFT_API void* fiber_callable(FiberControl* fiber) noexcept;
WEFT_API Fiber launch_fiber(SchedulerCore& core, FiberControl* fiber, FiberBody body) noexcept;
WEFT_API SchedulerCore& current_scheduler(const char* what);
}  // namespace detail

struct SpawnOptions {
  std::string_view name = {};  // default "fiber-<id>"; copied (up to 47 bytes)
  std::size_t stack_size = 0;  // usable bytes; 0: Config::stack_size
};

class WEFT_API Scheduler {
 public:
  explicit Scheduler(Config config = Config{});
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  template <class F>
  Fiber spawn(F&& fn) {
    return spawn(SpawnOptions{}, std::forward<F>(fn));
  }
  template <class F>
  Fiber spawn(const SpawnOptions& options, F&& fn);

  // Waits for all fibers and stops the workers; the destructor calls it.
  // Spawning afterwards throws std::logic_error.
  void shutdown();

  // Every worker and live fiber, for tools and tests (include/weft/snapshot.h).
  SchedulerSnapshot snapshot() const;
  const Config& config() const noexcept;
  unsigned worker_count() const noexcept;

 private:
  std::unique_ptr<detail::SchedulerCore> core_;
};

namespace detail {

// The callable lives in the fiber's control block if it fits, else at the
// top of the fiber's own stack: no allocation of its own.
template <class F>
Fiber spawn_on(SchedulerCore& core, const SpawnOptions& options, F&& fn) {
  using Fn = std::decay_t<F>;
  static_assert(std::is_invocable_v<Fn&>, "weft: a fiber body must be callable with no arguments");
  FiberControl* fiber = prepare_fiber(core, options, sizeof(Fn), alignof(Fn));
  try {
    ::new (fiber_callable(fiber)) Fn(std::forward<F>(fn));
  } catch (...) {
    abandon_fiber(core, fiber);
    throw;
  }
  return launch_fiber(core, fiber, [](void* callable, bool run) {
    Fn* body = static_cast<Fn*>(callable);
    struct Destroy {
      Fn* fn;
      ~Destroy() { fn->~Fn(); }
    } destroy{body};
    if (run) {
      std::invoke(*body);
      returned_from_user_code();
    }
  });
}

}  // namespace detail

template <class F>
Fiber Scheduler::spawn(const SpawnOptions& options, F&& fn) {
  return detail::spawn_on(*core_, options, std::forward<F>(fn));
}

// Spawns on the calling fiber's scheduler. Throws std::logic_error from a
// plain thread (use Scheduler::spawn there).
template <class F>
Fiber spawn(F&& fn) {
  return detail::spawn_on(detail::current_scheduler("weft::spawn"), SpawnOptions{}, std::forward<F>(fn));
}
template <class F>
Fiber spawn(const SpawnOptions& options, F&& fn) {
  return detail::spawn_on(detail::current_scheduler("weft::spawn"), options, std::forward<F>(fn));
}

}  // namespace weft
