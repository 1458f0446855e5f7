// weft::Pool: a named pool of `threads` workers that run submitted tasks,
// as plain threads or, when WEFT_FIBERS lists its name, as fibers. The code
// using it is the same either way (docs/pools.md).
//
//   weft::Pool pool{{.name = "rpc-handler", .threads = 64}};
//   weft::Future<int> answer = pool.submit([] { return 42; });
//   pool.post([] { log_request(); });       // fire and forget
//   pool.wait();                            // everything submitted so far is done
//   int v = answer.get();                   // 42, or rethrows what the task threw
//
// Same semantics in both modes: at most size() tasks run at once, in the
// order they were submitted (FIFO), each on one of size() runners named
// after the pool ("rpc-handler-3"). As threads, the runners are
// std::threads; as fibers, they are fibers on default_scheduler() (or on
// PoolOptions::scheduler), so a pool of 64 still bounds concurrency at 64,
// as Wisp keeps a pool's threads when it turns them into coroutines. Only
// the cost of a blocked task changes: a parked fiber leaves its worker free.
//
// post(): an exception escaping the task goes to PoolOptions::on_exception,
// by default a line on stderr naming the pool; the runner carries on.
// submit(): the exception goes to the Future instead.
//
// shutdown() stops accepting (later post()/submit() throw std::logic_error),
// runs what is queued and joins the runners; the destructor calls it.
// Calling shutdown(), wait() or the destructor from one of the pool's own
// tasks would wait for itself, and throws std::logic_error instead
// (the destructor terminates, as a throwing destructor must).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>

#include "detail/park.h"
#include "detail/require_cxx20.h"
#include "detail/task.h"
#include "fiber_list.h"
#include "future.h"
#include "snapshot.h"

namespace weft {

class Scheduler;

// Called with the pool's name and the exception that escaped a post()ed
// task, on the runner that ran it.
using PoolExceptionHandler = std::function<void(std::string_view pool, std::exception_ptr)>;

struct PoolOptions {
  // Required: WEFT_FIBERS selects pools by it, weft-dump shows it, and the
  // runners are named after it (a thread's OS name keeps its first 15 bytes).
  std::string name = {};
  // How many tasks run at once (BS::thread_pool's thread count); 0 is
  // rejected. The default is one per core, as BS::thread_pool's.
  unsigned threads = std::thread::hardware_concurrency() == 0 ? 1 : std::thread::hardware_concurrency();
  // by_name: WEFT_FIBERS decides (the switch). threads / fibers fix the mode
  // in code, whatever WEFT_FIBERS says.
  RunMode mode = RunMode::by_name;
  // Fibers only: the scheduler to run on; null means default_scheduler().
  // It must outlive the pool.
  Scheduler* scheduler = nullptr;
  // Fibers only: each runner's stack; 0 means the scheduler's default.
  std::size_t stack_size = 0;
  // For exceptions escaping post()ed tasks; empty: one line on stderr.
  PoolExceptionHandler on_exception = {};
};

namespace detail {
class PoolCore;
}

class Pool {
 public:
  // Throws std::invalid_argument for an empty name or threads == 0 (and
  // for a malformed WEFT_FIBERS or WEFT_WORKERS, when it consults them).
  explicit Pool(PoolOptions options);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Queues `fn` to run on the pool; throws std::logic_error after shutdown().
  template <class F>
  void post(F&& fn) {
    static_assert(std::is_invocable_v<std::decay_t<F>&>,
                  "weft::Pool::post: the task must be callable with no arguments");
    enqueue(detail::Task(std::forward<F>(fn)));
  }

  // Queues `fn` and returns the Future of what it returns or throws.
  template <class F, class R = std::invoke_result_t<std::decay_t<F>&>>
  Future<R> submit(F&& fn) {
    Promise<R> promise;
    Future<R> future = promise.get_future();
    enqueue(detail::Task([promise = std::move(promise), fn = std::forward<F>(fn)]() mutable {
      try {
        if constexpr (std::is_void_v<R>) {
          fn();
          promise.set_value();
        } else {
          promise.set_value(fn());
        }
      } catch (...) {
        promise.set_exception(std::current_exception());
      }
    }));
    return future;
  }

  // Blocks (parks, in a fiber) until every task submitted so far has
  // finished, in either mode.
  void wait();
  // As wait(), for at most `timeout`; false if tasks were still unfinished.
  template <class Rep, class Period>
  bool wait_for(const std::chrono::duration<Rep, Period>& timeout) {
    return wait_until_deadline(detail::deadline_after(timeout));
  }
  // Drops the tasks that have not started; their Futures throw
  // std::future_error(broken_promise). Returns how many were dropped.
  std::size_t purge();
  void shutdown();
  bool is_shut_down() const noexcept;

  const std::string& name() const noexcept;
  unsigned size() const noexcept;  // PoolOptions::threads
  bool runs_on_fibers() const noexcept;
  std::uint64_t queued() const;  // submitted, not started
  std::uint64_t running() const noexcept;
  std::uint64_t completed() const noexcept;  // finished, including those that threw
  PoolSnapshot snapshot() const;

 private:
  void enqueue(detail::Task task);
  bool wait_until_deadline(detail::Clock::time_point deadline);

  std::unique_ptr<detail::PoolCore> core_;
};

}  // namespace weft
