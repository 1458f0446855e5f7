// weft::Promise<T> / weft::Future<T>: a one-shot result passed from one
// fiber (or thread) to another. get() parks a waiting fiber and blocks a
// waiting plain thread in the kernel.
//
//   weft::Promise<int> promise;
//   weft::Future<int> answer = promise.get_future();
//   sched.spawn([p = std::move(promise)]() mutable { p.set_value(42); }).detach();
//   int v = answer.get();                        // 42; rethrows set_exception
//
// Errors are std::future_error with std's codes: a Promise destroyed
// without a result makes get() throw broken_promise; setting twice throws
// promise_already_satisfied; a second get_future() throws
// future_already_retrieved; using an empty Future throws no_state.
#pragma once

#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

#include "detail/park.h"
#include "detail/require_cxx20.h"

namespace weft {

namespace detail {

template <class T>
class SharedResult {
 public:
  using Stored = std::conditional_t<std::is_void_v<T>, bool, T>;

  template <class... Args>
  void set_value(Args&&... args) {
    std::lock_guard guard(lock_);
    if (ready_) throw std::future_error(std::future_errc::promise_already_satisfied);
    if constexpr (std::is_void_v<T>)
      value_.emplace(true);
    else
      value_.emplace(std::forward<Args>(args)...);
    publish();
  }
  void set_exception(std::exception_ptr error) {
    std::lock_guard guard(lock_);
    if (ready_) throw std::future_error(std::future_errc::promise_already_satisfied);
    error_ = std::move(error);
    publish();
  }
  // The promise is gone: a result that was never set becomes broken_promise.
  // Only a flag: each reader throws a future_error of its own (take), so no
  // exception object is shared between the promise's thread and the
  // reader's, and the promise's destructor allocates nothing. (A shared
  // one was freed by whichever thread dropped the last reference, ordered
  // only by libsupc++'s uninstrumented refcount: TSan reported the reader's
  // e.code() racing with that free.)
  void abandon() noexcept {
    std::lock_guard guard(lock_);
    if (ready_) return;
    broken_ = true;
    publish();
  }

  bool wait_until(Clock::time_point deadline) {
    return wait_unless(
        waiters_, lock_, [&] { return ready_; }, {"weft::Future", this, "get"}, deadline);
  }
  bool ready() {
    std::lock_guard guard(lock_);
    return ready_;
  }
  // After wait: the value, or the stored exception rethrown.
  Stored take() {
    wait_until(no_deadline);
    if (broken_) throw std::future_error(std::future_errc::broken_promise);
    if (error_) std::rethrow_exception(error_);
    return std::move(*value_);
  }

 private:
  void publish() {
    ready_ = true;
    wake_all(waiters_);
  }

  SpinLock lock_;
  bool ready_ = false;
  std::optional<Stored> value_;
  std::exception_ptr error_;
  bool broken_ = false;  // abandoned before a result was set
  WaitList waiters_;
};

}  // namespace detail

template <class T>
class Future {
 public:
  Future() noexcept = default;
  Future(Future&&) noexcept = default;
  Future& operator=(Future&&) noexcept = default;

  bool valid() const noexcept { return state_ != nullptr; }

  // Waits for the result and returns it (once: the future becomes empty).
  T get() {
    auto state = std::move(checked());
    if constexpr (std::is_void_v<T>)
      state->take();
    else
      return state->take();
  }
  void wait() const { checked()->wait_until(detail::no_deadline); }
  template <class Rep, class Period>
  std::future_status wait_for(const std::chrono::duration<Rep, Period>& timeout) const {
    return checked()->wait_until(detail::deadline_after(timeout)) ? std::future_status::ready
                                                                  : std::future_status::timeout;
  }
  template <class Clock, class Duration>
  std::future_status wait_until(const std::chrono::time_point<Clock, Duration>& deadline) const {
    return checked()->wait_until(detail::to_deadline(deadline)) ? std::future_status::ready
                                                                : std::future_status::timeout;
  }
  bool ready() const { return checked()->ready(); }

 private:
  template <class>
  friend class Promise;
  explicit Future(std::shared_ptr<detail::SharedResult<T>> state) noexcept : state_(std::move(state)) {}

  std::shared_ptr<detail::SharedResult<T>>& checked() const {
    if (!state_) throw std::future_error(std::future_errc::no_state);
    return state_;
  }

  mutable std::shared_ptr<detail::SharedResult<T>> state_;
};

template <class T>
class Promise {
 public:
  Promise() : state_(std::make_shared<detail::SharedResult<T>>()) {}
  Promise(Promise&&) noexcept = default;
  Promise& operator=(Promise&& other) noexcept {
    abandon();
    state_ = std::move(other.state_);
    retrieved_ = other.retrieved_;
    return *this;
  }
  Promise(const Promise&) = delete;
  Promise& operator=(const Promise&) = delete;
  ~Promise() { abandon(); }

  Future<T> get_future() {
    if (!state_) throw std::future_error(std::future_errc::no_state);
    if (retrieved_) throw std::future_error(std::future_errc::future_already_retrieved);
    retrieved_ = true;
    return Future<T>(state_);
  }
  template <class... Args>
  void set_value(Args&&... args) {
    checked().set_value(std::forward<Args>(args)...);
  }
  void set_exception(std::exception_ptr error) { checked().set_exception(std::move(error)); }

 private:
  detail::SharedResult<T>& checked() {
    if (!state_) throw std::future_error(std::future_errc::no_state);
    return *state_;
  }
  void abandon() noexcept {
    if (state_) state_->abandon();
  }

  std::shared_ptr<detail::SharedResult<T>> state_;
  bool retrieved_ = false;
};

}  // namespace weft
