// The two symbols that introspect/gdb/weft-gdb.py reads; what they are and
// why: gdb_layout.h.
#include "gdb_layout.h"

#include <pthread.h>
#include <weft/detail/spin_lock.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>

#include "../runtime/fiber_control.h"
#include "../runtime/member_offset.h"
#include "../sched/fiber_registry.h"
#include "../sched/scheduler_core.h"
#include "../sched/worker.h"

namespace weft::detail {

// One {name, value} pair of weft_gdb_layout.
struct GdbLayoutEntry {
  const char* name;
  std::uint64_t value;
};

// FiberControl, FiberRegistry and Worker let this read their private parts.
struct GdbLayoutAccess {
  static const void* shards(const FiberRegistry& registry) noexcept { return registry.shards_.get(); }
  static std::uint64_t shard_count(const FiberRegistry& registry) noexcept { return registry.shard_count_; }
  static constexpr std::uint64_t shard_size = sizeof(FiberRegistry::Shard);
  static constexpr std::uint64_t shard_head = offsetof(FiberRegistry::Shard, head);
  static constexpr std::uint64_t shard_fibers = offsetof(FiberRegistry::Shard, count);
  static std::uint64_t fiber_name() noexcept { return member_offset(&FiberControl::name_); }
  static constexpr std::uint64_t fiber_name_size = sizeof(FiberControl::name_);
  static std::uint64_t worker_tid() noexcept {
    return member_offset(&Worker::os_thread_) + member_offset(&OsThread::tid_);
  }
};

namespace {

std::uint64_t fiber_counter(std::atomic<std::uint64_t> FiberCounters::*counter) noexcept {
  return member_offset(&FiberControl::counters) + member_offset(counter);
}

constexpr std::uint64_t state(FiberState s) noexcept { return static_cast<std::uint64_t>(s); }

// Guards weft_gdb_schedulers against concurrent schedulers' constructors
// and destructors. A SpinLock, not a std::mutex: constant-initialized and
// trivially destroyed, so a scheduler that is itself a static object may
// still take it during static destruction.
SpinLock list_lock;

// fork(): held across it, so that the child's copy is consistent and free
// (a scheduler the child makes registers here).
[[gnu::constructor]] void register_fork_handlers() {
  pthread_atfork([] { list_lock.lock(); }, [] { list_lock.unlock(); }, [] { list_lock.unlock(); });
}

}  // namespace

}  // namespace weft::detail

// C names, so that the script finds them without demangling, and default
// visibility and `used`, so that neither the linker nor the compiler drops
// what nothing in the program refers to.
extern "C" {

[[gnu::used, gnu::visibility("default")]] weft::detail::GdbScheduler* weft_gdb_schedulers = nullptr;

// The first entry names the table and its version, raised when an entry
// changes meaning; new entries may appear without it. "fiber.*" are offsets
// in FiberControl (runtime/fiber_control.h): the id and counters are
// 64-bit, the state 1 byte (values "state.*"), the pin count 4 bytes, the
// wait fields and `worker` pointers. "worker.tid" is the offset of a
// Worker's OS thread id (4 bytes), to find its thread in gdb. "context.*" describe the frame a saved
// context points at (runtime/fcontext_x86_64.cpp, Boost.Context 1.74's on
// x86-64 as well): offsets of the saved registers, and `frame_size`, the
// stack pointer's distance from the frame once it is resumed. The member
// offsets are no constant expressions (runtime/member_offset.h): the table
// is filled when libweft is loaded, and a core file holds it as filled.
[[gnu::used, gnu::visibility("default")]] weft::detail::GdbLayoutEntry weft_gdb_layout[] = {
    {"weft-gdb-layout", 1},
    {"pointer_size", sizeof(void*)},
    {"scheduler.next", offsetof(weft::detail::GdbScheduler, next)},
    {"scheduler.name", offsetof(weft::detail::GdbScheduler, name)},
    {"scheduler.shards", offsetof(weft::detail::GdbScheduler, shards)},
    {"scheduler.shard_count", offsetof(weft::detail::GdbScheduler, shard_count)},
    {"scheduler.workers", offsetof(weft::detail::GdbScheduler, workers)},
    {"scheduler.worker_count", offsetof(weft::detail::GdbScheduler, worker_count)},
    {"scheduler.regular_workers", offsetof(weft::detail::GdbScheduler, regular_workers)},
    {"worker.tid", weft::detail::GdbLayoutAccess::worker_tid()},
    {"shard.size", weft::detail::GdbLayoutAccess::shard_size},
    {"shard.head", weft::detail::GdbLayoutAccess::shard_head},
    {"shard.fibers", weft::detail::GdbLayoutAccess::shard_fibers},
    {"fiber.size", sizeof(weft::detail::FiberControl)},
    {"fiber.id", weft::detail::member_offset(&weft::detail::FiberControl::id)},
    {"fiber.name", weft::detail::GdbLayoutAccess::fiber_name()},
    {"fiber.name_size", weft::detail::GdbLayoutAccess::fiber_name_size},
    {"fiber.state", weft::detail::member_offset(&weft::detail::FiberControl::state)},
    {"fiber.worker", weft::detail::member_offset(&weft::detail::FiberControl::worker)},
    {"fiber.pin_count", weft::detail::member_offset(&weft::detail::FiberControl::pin_count)},
    {"fiber.active", weft::detail::fiber_counter(&weft::detail::FiberCounters::active)},
    {"fiber.steal", weft::detail::fiber_counter(&weft::detail::FiberCounters::steal)},
    {"fiber.steal_fail", weft::detail::fiber_counter(&weft::detail::FiberCounters::steal_fail)},
    {"fiber.preempt", weft::detail::fiber_counter(&weft::detail::FiberCounters::preempt)},
    {"fiber.park", weft::detail::fiber_counter(&weft::detail::FiberCounters::park)},
    {"fiber.wait_kind", weft::detail::member_offset(&weft::detail::FiberControl::wait_kind)},
    {"fiber.wait_object", weft::detail::member_offset(&weft::detail::FiberControl::wait_object)},
    {"fiber.wait_operation", weft::detail::member_offset(&weft::detail::FiberControl::wait_operation)},
    {"fiber.parked_since_ns", weft::detail::member_offset(&weft::detail::FiberControl::parked_since_ns)},
    {"fiber.saved_context", weft::detail::member_offset(&weft::detail::FiberControl::context) +
                                weft::detail::member_offset(&weft::detail::ExecutionContext::saved)},
    {"fiber.registry_next", weft::detail::member_offset(&weft::detail::FiberControl::registry_next)},
    {"state.runnable", weft::detail::state(weft::detail::FiberState::runnable)},
    {"state.running", weft::detail::state(weft::detail::FiberState::running)},
    {"state.parked", weft::detail::state(weft::detail::FiberState::parked)},
    {"state.done", weft::detail::state(weft::detail::FiberState::done)},
#if defined(__x86_64__)
    {"context.x86_64", 1},
    {"context.r12", 0x08},
    {"context.r13", 0x10},
    {"context.r14", 0x18},
    {"context.r15", 0x20},
    {"context.rbx", 0x28},
    {"context.rbp", 0x30},
    {"context.pc", 0x38},
    {"context.frame_size", 0x40},
#endif
    {nullptr, 0},
};

}  // extern "C"

namespace weft::detail {

void list_for_gdb(SchedulerCore& core) noexcept {
  const auto& workers = core.workers();
  auto* entry = new (std::nothrow) GdbScheduler{};
  auto* worker_array = new (std::nothrow) const void*[workers.size()];
  if (entry == nullptr || worker_array == nullptr) {
    delete entry;
    delete[] worker_array;
    return;
  }
  for (std::size_t i = 0; i < workers.size(); ++i) worker_array[i] = workers[i].get();
  entry->core = &core;
  entry->name = core.config().name.c_str();
  entry->shards = GdbLayoutAccess::shards(core.registry());
  entry->shard_count = GdbLayoutAccess::shard_count(core.registry());
  entry->workers = worker_array;
  entry->worker_count = workers.size();
  entry->regular_workers = core.config().workers;
  // Appended, so that gdb lists schedulers in creation order, as weft-dump.
  std::lock_guard guard(list_lock);
  GdbScheduler** link = &weft_gdb_schedulers;
  while (*link != nullptr) link = &(*link)->next;
  *link = entry;
}

void unlist_for_gdb(const SchedulerCore& core) noexcept {
  GdbScheduler* entry = nullptr;
  {
    std::lock_guard guard(list_lock);
    for (GdbScheduler** link = &weft_gdb_schedulers; *link != nullptr; link = &(*link)->next) {
      if ((*link)->core == &core) {
        entry = *link;
        *link = entry->next;
        break;
      }
    }
  }
  if (entry == nullptr) return;  // never listed: list_for_gdb could not allocate
  delete[] entry->workers;
  delete entry;
}

}  // namespace weft::detail
