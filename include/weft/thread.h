// weft::Thread: std::thread with a name, which runs as a fiber when
// WEFT_FIBERS lists that name and as a std::thread otherwise.
//
//   weft::Thread t{"conn-7", [](int fd) { serve(fd); }, fd};
//   t.join();
//
// std::thread's contract in both modes: join() waits (parks, in a fiber),
// detach() lets it run on, and destroying or assigning over a joinable
// Thread terminates the process. An exception escaping the function
// terminates too, as it does on a std::thread (a weft::Fiber would carry it
// to join() instead). As a fiber it runs on default_scheduler(), or on
// ThreadOptions::scheduler. As a std::thread its OS name is the first 15
// bytes of the name.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>

#include "detail/require_cxx20.h"
#include "detail/visibility.h"
#include "fiber.h"
#include "fiber_list.h"
#include "scheduler.h"

namespace weft {

struct ThreadOptions {
  std::string_view name = {};  // required; WEFT_FIBERS selects by it
  RunMode mode = RunMode::by_name;
  Scheduler* scheduler = nullptr;  // fibers: null means default_scheduler()
  std::size_t stack_size = 0;      // fibers: 0 means the scheduler's default
};

namespace detail {
// The scheduler a Thread of these options runs on, or null for a
// std::thread. Throws std::invalid_argument for an empty name.
WEFT_API Scheduler* thread_scheduler(const ThreadOptions& options);
WEFT_API void name_this_thread(std::string_view name) noexcept;
// Runs `body` on the calling (new) thread, named `name` and listed for
// weft-dump while it runs (pool/thread_registry.h).
WEFT_API void run_listed_thread(std::string_view name, void (*body)(void*), void* context) noexcept;
// A joinable Thread destroyed or assigned over: says which, then
// terminates (std::thread's rule, with the name a reader needs).
[[noreturn]] WEFT_API void thread_left_joinable(std::string_view name, const char* what) noexcept;
}  // namespace detail

class WEFT_API Thread {
 public:
  Thread() noexcept = default;
  template <class F, class... Args>
  Thread(std::string_view name, F&& fn, Args&&... args)
      : Thread(ThreadOptions{.name = name}, std::forward<F>(fn), std::forward<Args>(args)...) {}
  template <class F, class... Args>
  Thread(const ThreadOptions& options, F&& fn, Args&&... args) {
    static_assert(std::is_invocable_v<std::decay_t<F>, std::decay_t<Args>...>,
                  "weft::Thread: the function must be callable with the given arguments");
    // Decay-copied as std::thread does, and called from a noexcept body so
    // that an escaping exception terminates in both modes.
    auto body = [fn = std::forward<F>(fn), args = std::make_tuple(std::forward<Args>(args)...)]() mutable noexcept {
      std::apply(std::move(fn), std::move(args));
    };
    name_ = options.name;
    if (Scheduler* scheduler = detail::thread_scheduler(options)) {
      on_fiber_ = true;
      fiber_ = scheduler->spawn(SpawnOptions{.name = options.name, .stack_size = options.stack_size}, std::move(body));
    } else {
      thread_ = std::thread([name = name_, body = std::move(body)]() mutable noexcept {
        detail::run_listed_thread(
            name, [](void* f) { (*static_cast<decltype(body)*>(f))(); }, &body);
      });
    }
  }
  Thread(Thread&& other) noexcept
      : fiber_(std::move(other.fiber_)),
        thread_(std::move(other.thread_)),
        name_(std::move(other.name_)),
        on_fiber_(std::exchange(other.on_fiber_, false)) {}
  Thread& operator=(Thread&& other) noexcept {
    if (joinable()) detail::thread_left_joinable(name_, "assigned over");
    fiber_ = std::move(other.fiber_);
    thread_ = std::move(other.thread_);
    name_ = std::move(other.name_);
    on_fiber_ = std::exchange(other.on_fiber_, false);
    return *this;
  }
  Thread(const Thread&) = delete;
  Thread& operator=(const Thread&) = delete;
  // Terminates if joinable (std::thread's rule), naming the Thread, in both
  // modes.
  ~Thread() {
    if (joinable()) detail::thread_left_joinable(name_, "destroyed");
  }

  bool joinable() const noexcept { return fiber_.joinable() || thread_.joinable(); }
  // Throws std::system_error(invalid_argument) when not joinable, as
  // std::thread does, and (resource_deadlock_would_occur) on joining itself.
  void join();
  void detach();

  const std::string& name() const noexcept { return name_; }
  // Which mode it was started in (false for an empty Thread).
  bool runs_on_fiber() const noexcept { return on_fiber_; }

 private:
  Fiber fiber_;
  std::thread thread_;
  std::string name_;
  bool on_fiber_ = false;
};

}  // namespace weft
