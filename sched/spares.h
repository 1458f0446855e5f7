// Spare workers: threads that run fibers while workers are blocked in the
// kernel, Go's handoffp and startm in weft's terms (docs/sysmon.md, "Spare
// workers").
//
// A spare is a Worker like the others (sched/worker.h), with its own queues
// and an index from Config::workers on. Sysmon decides how many may run
// (set_target: one per thread blocked in the kernel, worker or spare) and
// starts them (activate): the lowest spare that is not running, or a new
// one, up to Config::max_threads threads in all. An active spare runs the
// usual loop, idle sleep and the netpoller included, in place of the thread
// it stands in for: the timers and fds of a scheduler whose workers are all
// blocked are served by it.
//
// Retirement: a spare retires, flushing its queues to the global queue, at
// its next switch once it is surplus (more active than threads blocked),
// or, idle, when sysmon wakes it for that (tidy). Its thread then waits to
// be activated again, and ends after Config::spare_keep_alive without an
// activation (tokio's thread_keep_alive); the Worker stays, for a later
// thread, so that readers never see one freed.
//
// The invariant: at most Config::workers threads run fibers at any instant,
// except while a thread is blocked in the kernel, and for two windows: a
// returned worker and the surplus spare that replaced it both run until the
// spare's next switch (within a time slice: sysmon preempts it), and a
// spare on which a fiber is pinned does not retire until that fiber unpins.
//
// Who touches what: activate, set_target and tidy run on sysmon's thread
// (and stop at shutdown, after sysmon has stopped); serve and
// retire_if_surplus on a spare's own thread; the rest on any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>

namespace weft::detail {

class SchedulerCore;
class Worker;

class Spares {
 public:
  // `capacity`: Config::max_threads less Config::workers.
  Spares(SchedulerCore& core, unsigned capacity);
  Spares(const Spares&) = delete;
  Spares& operator=(const Spares&) = delete;
  ~Spares();

  unsigned capacity() const noexcept { return capacity_; }
  // Spares made so far; at(i) is valid below it.
  unsigned created() const noexcept { return created_.load(std::memory_order_acquire); }
  Worker& at(unsigned i) const noexcept { return *slots_[i].load(std::memory_order_relaxed); }
  // How many spares, from the first, may hold fibers: up to the highest
  // running one. Thieves and sysmon look no further. Raised before a spare's
  // thread can run, lowered past spares that have retired and flushed.
  unsigned span() const noexcept { return span_.load(std::memory_order_acquire); }

  // --- sysmon -----------------------------------------------------------
  // How many spares may run fibers now.
  void set_target(unsigned target) noexcept { target_.store(target, std::memory_order_relaxed); }
  unsigned target() const noexcept { return target_.load(std::memory_order_relaxed); }
  unsigned active() const noexcept { return active_.load(std::memory_order_relaxed); }
  bool surplus() const noexcept { return active() > target(); }
  // Starts or wakes one spare that is not running: false when none could
  // be (at the thread limit, or the system gave no thread).
  bool activate() noexcept;
  // Whether fibers wait for a thread that the limit keeps from starting:
  // shown by limit_reached(), and reported once on stderr, naming the
  // limit and how to raise it.
  void set_short_of_threads(bool short_of_threads) noexcept;
  // Wakes the surplus spares that sleep idle, so that they retire, and
  // narrows span() past the retired ones at its end.
  void tidy() noexcept;
  // Whether sysmon's last look found fibers waiting for a thread beyond
  // the limit, for weft-dump.
  bool limit_reached() const noexcept { return limit_reached_.load(std::memory_order_relaxed); }
  // Spares whose thread runs fibers now, and spare threads alive (some
  // retired, waiting to be activated).
  unsigned running() const noexcept;
  unsigned threads() const noexcept;

  // --- a spare's own thread ---------------------------------------------
  // Its loop, between activations, until shutdown or its keep-alive ends.
  void serve(Worker& spare);
  // Retires the calling spare if it is surplus (false if it is not, or
  // another spare took the retirement).
  bool retire_if_surplus() noexcept;

  // Shutdown, once the scheduler stops and sysmon is gone: every spare
  // thread ends and is joined.
  void stop() noexcept;

 private:
  bool start(Worker& spare, unsigned slot) noexcept;
  // Once per scheduler: the system refused a spare's thread (`error`).
  void report_start_failure(const std::exception& error) noexcept;
  // Waits for the next activation from `seen`; false when the keep-alive
  // ran out first (the thread then ends).
  bool wait_for_activation(Worker& spare, std::uint32_t& seen) noexcept;

  SchedulerCore& core_;
  const unsigned capacity_;
  const std::chrono::milliseconds keep_alive_;
  std::unique_ptr<std::atomic<Worker*>[]> slots_;  // created_ of them, never freed before the scheduler
  std::atomic<unsigned> created_{0};
  std::atomic<unsigned> span_{0};
  std::atomic<unsigned> target_{0};
  std::atomic<unsigned> active_{0};  // counted by start and retire_if_surplus
  std::atomic<bool> limit_reached_{false};
  bool limit_reported_ = false;          // sysmon's
  bool start_failure_reported_ = false;  // sysmon's: a thread the system refused (Spares::start)
};

}  // namespace weft::detail
