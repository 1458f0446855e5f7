// How a scheduler's snapshot is taken: from any thread, reading only the
// workers' relaxed counters and the fibers under their registry shard's lock.
// No worker is asked for anything, so a stuck worker cannot stall a dump.
#include "snapshot.h"

#include <unistd.h>

#include "../io/blocking_pool.h"
#include "../sched/kernel_call.h"
#include "../sched/scheduler_core.h"
#include "../sched/wait_owner.h"
#include "../sched/worker.h"
#include "fd_info.h"
#include "fiber_stack_walk.h"
#include "kernel_wait.h"
#include "thread_stack.h"

namespace weft::detail {

SchedulerSnapshot snapshot_scheduler(SchedulerCore& core, bool with_fibers) {
  SchedulerSnapshot snap;
  snap.name = core.config().name;
  // Workers whose thread sleeps in a system call while it runs a fiber:
  // the call, and the switch count then, to walk that fiber's stack below
  // (and drop the walk if the worker switched meanwhile).
  struct InKernel {
    const Worker* worker;
    std::uint64_t tick;
    KernelWait call;
  };
  std::vector<InKernel> in_kernel;
  const std::size_t span = core.config().workers + core.spares().created();
  snap.workers.reserve(span);
  for (std::size_t i = 0; i < span; ++i) {
    const Worker* worker = &core.worker(i);
    if (worker->is_spare() && !worker->spare_thread_alive()) continue;
    WorkerSnapshot w;
    w.index = worker->index();
    w.os_thread_id = worker->os_thread().id();
    w.state = to_string(worker->state());
    w.queue_length = worker->queue_length();
    w.inbox_length = worker->inbox_length();
    w.pinned_fibers = worker->pinned_count();
    const auto& c = worker->counters();
    w.fibers_run = c.fibers_run.load(std::memory_order_relaxed);
    w.steals = c.steals.load(std::memory_order_relaxed);
    w.failed_steals = c.failed_steals.load(std::memory_order_relaxed);
    w.parks = c.parks.load(std::memory_order_relaxed);
    w.preempts = c.preempts.load(std::memory_order_relaxed);
    w.handoffs = c.handoffs.load(std::memory_order_relaxed);
    const Sysmon::WorkerView seen = core.sysmon().view(worker->index());
    w.running_ms = seen.running_ms;
    w.stuck = seen.stuck;
    w.stuck_fiber = seen.fiber_id;
    if (w.stuck) w.blocked_in = describe_kernel_call(w.os_thread_id);
    w.spare = worker->is_spare();
    if (worker->current() != nullptr) {
      const std::uint64_t tick = worker->switch_tick();
      const KernelWait call = read_kernel_wait(w.os_thread_id);
      if (call.number >= 0) {
        w.syscall = describe_kernel_wait(call);
        w.syscall_ms = off_cpu_ms(w.os_thread_id);
        in_kernel.push_back({worker, tick, call});
      }
    }
    snap.workers.push_back(w);
  }
  snap.poller = core.poller().view();
  const std::int64_t global = core.global_size();  // may dip below 0 for a moment (counted after the dequeue)
  snap.global_queue = global > 0 ? static_cast<std::uint64_t>(global) : 0;
  snap.sched_latency = core.sched_latency_since_last();
  snap.blocking.max_threads = blocking_thread_limit(core.config());
  snap.spares.running = core.spares().running();
  snap.spares.threads = core.spares().threads();
  snap.spares.max_threads = core.config().max_threads;
  snap.spares.limit_reached = core.spares().limit_reached();
  if (const BlockingPool* pool = BlockingPool::find(core)) {
    const BlockingPool::Stats stats = pool->stats();
    snap.blocking.threads = stats.threads;
    snap.blocking.busy = stats.busy;
    snap.blocking.queued = stats.queued;
    snap.blocking.calls = stats.calls;
  }
  if (!with_fibers) {
    snap.fiber_count = core.registry().size();
    core.registry().for_each([&](const FiberControl& fiber) {
      const FiberState state = fiber.state.load(std::memory_order_relaxed);
      if (state == FiberState::runnable) ++snap.fiber_states.runnable;
      if (state == FiberState::running) ++snap.fiber_states.running;
      if (state == FiberState::parked) ++snap.fiber_states.parked;
    });
    return snap;
  }
  // A fiber stays in the shard it was registered in for its whole life, so
  // it appears exactly once however it migrates meanwhile.
  snap.fibers.reserve(core.registry().size());
  // Parked fibers' stacks are read in batches (introspect/fiber_stack_walk.h).
  // A batch is walked before its shard's lock is released, while its
  // fibers live, and before `snap.fibers` grows (fibers spawned since the
  // reserve), which would move the stacks it is to fill.
  ParkedStackWalker walker(::getpid());
  core.registry().for_each(
      [&](const FiberControl& fiber) {
        if (snap.fibers.size() == snap.fibers.capacity()) walker.walk();
        FiberSnapshot& f = snap.fibers.emplace_back(take_snapshot(fiber));
        // Acquire: the worker may be a spare made since (sched/worker.cpp).
        if (const Worker* worker = fiber.worker.load(std::memory_order_acquire))
          f.worker = static_cast<int>(worker->index());
        if (f.wait_kind == kFdWaitKind) {
          // The site's object is the fd's number (io/netpoller.cpp). Described
          // now: what it is may have changed since the fiber parked.
          f.wait_fd = static_cast<int>(reinterpret_cast<std::uintptr_t>(f.wait_object));
          f.wait_fd_info = describe_fd(f.wait_fd);
        }
        for (const InKernel& k : in_kernel) {
          if (k.worker->current() != &fiber) continue;
          // Its stack bounds were written when it first ran, before the
          // switch-in that counts it active (a release; this is its acquire).
          if (fiber.counters.active.load(std::memory_order_acquire) == 0) continue;
          const auto low = reinterpret_cast<std::uintptr_t>(fiber.context.stack_bottom);
          f.stack = walk_blocked_stack(k.call.sp, k.call.pc, low, low + fiber.context.stack_size);
          if (k.worker->switch_tick() != k.tick) f.stack.clear();
        }
        if (f.park_state == -1) {
          // The kind taken with the object, not read again: the fiber may
          // park elsewhere meanwhile, and the object then is not of it.
          const WaitOwner owner = find_wait_owner(f.wait_kind.c_str(), f.wait_object);
          f.held_by_fiber = owner.fiber;
          f.held_by_thread = owner.thread;
          f.held_by_readers = owner.readers;
          walker.add(fiber, f.stack);
          if (walker.full()) walker.walk();
        }
      },
      [&] { walker.walk(); });
  snap.fiber_count = snap.fibers.size();
  for (const FiberSnapshot& f : snap.fibers) {
    if (f.state == "runnable") ++snap.fiber_states.runnable;
    if (f.state == "running") ++snap.fiber_states.running;
    if (f.state == "parked") ++snap.fiber_states.parked;
  }
  return snap;
}

void read_waits(SchedulerCore& core, const std::unordered_set<std::uint64_t>& members, FiberWaits& out) {
  core.registry().for_each([&](const FiberControl& fiber) {
    if (members.count(fiber.id) == 0 || fiber.state.load(std::memory_order_relaxed) != FiberState::parked) return;
    const char* kind = fiber.wait_kind.load(std::memory_order_relaxed);
    const void* object = fiber.wait_object.load(std::memory_order_relaxed);
    out[fiber.id] = {fiber.counters.park.load(std::memory_order_relaxed), object,
                     kind != nullptr ? find_wait_owner(kind, object).fiber : 0};
  });
}

}  // namespace weft::detail
