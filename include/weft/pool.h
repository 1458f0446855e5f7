// weft::Pool: a named pool of `threads` workers that run submitted tasks,
// as plain threads or, when WEFT_FIBERS lists its name, as fibers. The code
// using it is the same either way (docs/pools.md).
//
//   weft::Pool pool{{.name = "rpc-handler", .threads = 64}};
//   weft::Future<int> answer = pool.submit([] { return 42; });
//   pool.post([] { log_request(); });       // fire and forget
//   pool.wait();                            // everything submitted so far is done
//   int v = answer.get();                   // 42, or rethrows what the task threw
//   pool.submit_loop(0, n, [&](int i) { out[i] = f(in[i]); }).get();  // size() blocks
//
// Same semantics in both modes: at most size() tasks run at once, in the
// order they were submitted (FIFO), each on one of size() runners named
// after the pool ("rpc-handler-3"). As threads, the runners are
// std::threads; as fibers, they are fibers on default_scheduler() (or on
// PoolOptions::scheduler), so a pool of 64 still bounds concurrency at 64,
// as Wisp keeps a pool's threads when it turns them into coroutines. Only
// the cost of a blocked task changes: a parked fiber leaves its worker free.
// Runners start on demand (a task that finds none idle starts one, up to
// size()), so a large pool costs only what has run at once.
//
// post(): an exception escaping the task goes to PoolOptions::on_exception,
// by default a line on stderr naming the pool; the runner carries on.
// submit(): the exception goes to the Future instead.
//
// shutdown() stops accepting (later post()/submit() throw std::logic_error),
// runs what is queued and joins the runners; the destructor calls it.
// pause() holds the queued tasks back until unpause(); purge() drops them.
// Calling shutdown(), wait() or the destructor from one of the pool's own
// tasks would wait for itself, and throws std::logic_error instead
// (the destructor terminates, as a throwing destructor must).
#pragma once

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "detail/park.h"
#include "detail/require_cxx20.h"
#include "detail/task.h"
#include "detail/visibility.h"
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
  // Checked in both modes (16 KiB to 1 TiB), so that listing the pool in
  // WEFT_FIBERS never makes its options wrong.
  std::size_t stack_size = 0;
  // For exceptions escaping post()ed tasks; empty: one line on stderr.
  PoolExceptionHandler on_exception = {};
};

namespace detail {
class PoolCore;
// An index for Pool's loops: an integer, not bool.
template <class T>
concept LoopIndex = std::integral<T> && !std::same_as<std::remove_cv_t<T>, bool>;
}  // namespace detail

class WEFT_API Pool {
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

  // BS::thread_pool's loops: fn(i) for every i in [first, last), split into
  // `blocks` contiguous blocks of near-equal size (0: size(); never more
  // blocks than indices), each one task. fn is shared by the blocks and
  // called from several at once. A reversed range throws
  // std::invalid_argument; an empty one queues nothing.
  //
  // detach_loop posts the blocks: wait() waits for them, and an exception
  // escaping fn ends its block and goes where a post()ed task's goes.
  template <detail::LoopIndex T, class F>
  void detach_loop(T first, T last, F&& fn, std::size_t blocks = 0) {
    auto body = std::make_shared<std::decay_t<F>>(std::forward<F>(fn));
    for_each_block(first, last, blocks, "detach_loop", [&](T begin, T end) {
      post([body, begin, end] {
        for (T i = begin; i != end; ++i) (*body)(i);
      });
    });
  }
  // submit_loop submits them: the Future is ready once every block has
  // finished, and rethrows the first exception a block threw (that block
  // stops at it, the others run to their end).
  template <detail::LoopIndex T, class F>
  Future<void> submit_loop(T first, T last, F&& fn, std::size_t blocks = 0) {
    struct Loop {
      explicit Loop(F&& f) : body(std::forward<F>(f)) {}
      std::decay_t<F> body;
      Promise<void> done;
      std::atomic<std::size_t> left{0};
      std::atomic<bool> failed{false};
      std::exception_ptr error;  // written by the first to fail, read by the last to finish
    };
    auto loop = std::make_shared<Loop>(std::forward<F>(fn));
    Future<void> future = loop->done.get_future();
    std::vector<std::pair<T, T>> ranges;
    for_each_block(first, last, blocks, "submit_loop", [&](T begin, T end) { ranges.emplace_back(begin, end); });
    if (ranges.empty()) {
      loop->done.set_value();
      return future;
    }
    // Counted before any block can finish; a block that cannot be queued
    // (shutdown) throws here, and the blocks queued before it still finish.
    loop->left.store(ranges.size(), std::memory_order_relaxed);
    for (const auto& [begin, end] : ranges) {
      post([loop, begin = begin, end = end] {
        try {
          for (T i = begin; i != end; ++i) loop->body(i);
        } catch (...) {
          if (!loop->failed.exchange(true, std::memory_order_relaxed)) loop->error = std::current_exception();
        }
        // acq_rel: the last block sees the error the first failing one wrote.
        if (loop->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        if (loop->error)
          loop->done.set_exception(loop->error);
        else
          loop->done.set_value();
      });
    }
    return future;
  }

  // Blocks (parks, in a fiber) until every task submitted so far has
  // finished, in either mode.
  void wait();
  // As wait(), for at most `timeout`, or until `deadline`; false if tasks
  // were still unfinished.
  template <class Rep, class Period>
  bool wait_for(const std::chrono::duration<Rep, Period>& timeout) {
    return wait_until_deadline(detail::deadline_after(timeout));
  }
  template <class Clock, class Duration>
  bool wait_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return wait_until_deadline(detail::to_deadline(deadline));
  }
  // Drops the tasks that have not started; their Futures throw
  // std::future_error(broken_promise). Returns how many were dropped.
  std::size_t purge();
  // BS::thread_pool's pause: no queued task starts until unpause(); tasks
  // already running go on, and post()/submit() still queue. While paused,
  // wait() waits only for the running tasks (the queued ones would never
  // finish), and shutdown() still runs everything queued before it joins.
  void pause();
  void unpause();
  bool is_paused() const;
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
  // Splits [first, last) as detach_loop and submit_loop document and calls
  // block(begin, end) for each block in order.
  template <class T, class Block>
  void for_each_block(T first, T last, std::size_t blocks, const char* call, Block&& block) const {
    if (last < first) throw std::invalid_argument(std::string("weft::Pool::") + call + ": last is before first");
    // The count in the unsigned type of T's width: last - first may not fit T.
    using U = std::make_unsigned_t<T>;
    const U count = static_cast<U>(static_cast<U>(last) - static_cast<U>(first));
    if (count == 0) return;
    std::size_t n = blocks == 0 ? size() : blocks;
    if (static_cast<std::uintmax_t>(n) > static_cast<std::uintmax_t>(count)) n = static_cast<std::size_t>(count);
    const U base = static_cast<U>(count / n);
    const U extra = static_cast<U>(count % n);  // the first `extra` blocks take one more
    U offset = 0;
    for (std::size_t b = 0; b < n; ++b) {
      const U length = static_cast<U>(base + (static_cast<U>(b) < extra ? 1 : 0));
      const T begin = static_cast<T>(static_cast<U>(first) + offset);
      offset = static_cast<U>(offset + length);
      block(begin, static_cast<T>(static_cast<U>(first) + offset));
    }
  }

  void enqueue(detail::Task task);
  bool wait_until_deadline(detail::Clock::time_point deadline);

  std::unique_ptr<detail::PoolCore> core_;
};

}  // namespace weft
