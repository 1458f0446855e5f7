// weft::blocking(fn): runs a call that would block its thread (a regular
// file's read, getaddrinfo, a driver's own blocking call) on a helper
// thread, and parks the calling fiber until it returns, so that the worker
// runs other fibers meanwhile (Photon's WorkPool::call, tokio's
// spawn_blocking).
//
//   std::string text = weft::blocking([&] { return read_whole_file(path); });
//   weft::blocking([&] { ::fsync(fd); });       // void is fine
//
// It returns what fn returns (a reference stays a reference) and rethrows
// what fn throws. From a plain thread (a helper's included) it just calls
// fn there. The helpers are per scheduler: Config::blocking_threads of them
// at most, started on first use and named "<scheduler>-blocking-N"; when
// all are busy, callers queue in arrival order (docs/io.md). fn runs on
// another thread: thread_locals are the helper's, and weft primitives it
// calls block that helper, not a fiber.
#pragma once

#include <exception>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

#include "detail/require_cxx20.h"
#include "detail/visibility.h"

namespace weft {

namespace detail {

// Runs call(arg) on a helper thread of the calling fiber's scheduler and
// parks the fiber until it has returned (io/blocking_pool.h); on a plain
// thread, calls it right here. `call` must not throw.
WEFT_API void run_blocking(void (*call)(void*), void* arg);

// What fn returned or threw, carried back from the helper thread.
template <class R>
class BlockingResult {
 public:
  template <class F>
  void capture(F& fn) noexcept {
    try {
      if constexpr (std::is_void_v<R>) {
        std::invoke(fn);
      } else if constexpr (std::is_reference_v<R>) {
        value_ = &std::invoke(fn);
      } else {
        value_.emplace(std::invoke(fn));
      }
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  R take() {
    if (error_) std::rethrow_exception(error_);
    if constexpr (std::is_void_v<R>) {
      return;
    } else if constexpr (std::is_reference_v<R>) {
      return static_cast<R>(**value_);
    } else {
      return std::move(*value_);
    }
  }

 private:
  using Stored = std::conditional_t<std::is_reference_v<R>, std::remove_reference_t<R>*, R>;
  std::conditional_t<std::is_void_v<R>, bool, std::optional<Stored>> value_{};
  std::exception_ptr error_;
};

}  // namespace detail

template <class F>
std::invoke_result_t<F&> blocking(F&& fn) {
  using R = std::invoke_result_t<F&>;
  struct Call {
    F& fn;
    detail::BlockingResult<R> result;
    static void run(void* self) noexcept {
      auto* call = static_cast<Call*>(self);
      call->result.capture(call->fn);
    }
  };
  Call call{fn, {}};
  detail::run_blocking(&Call::run, &call);
  return call.result.take();
}

}  // namespace weft
