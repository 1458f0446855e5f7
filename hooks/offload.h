// A hooked call run on a helper thread of the fiber's blocking pool
// (io/blocking_pool.h) while the fiber parks: for calls that wait inside
// libc or the kernel where no hook can make them park (the resolver's,
// hooks/hooks_resolver.cpp; futex waits, hooks/hooks_futex.cpp).
//
// The thread's locale (uselocale) is the caller's on the helper: glibc's
// IDN conversions (getaddrinfo's AI_IDN, getnameinfo's NI_IDN) read its
// character set, and in the helper's global "C" locale a UTF-8 name failed
// with EAI_IDN_ENCODE. errno and h_errno are per thread: the helper starts
// from the caller's, so that one the call leaves alone (getaddrinfo's
// argument errors, a gethostbyname_r that sets only its own h_errno) comes
// back as the caller's, not as what the helper's earlier call left. What
// the call left goes to the thread the fiber resumes on and, if sysmon released its pin
// (ParkScope, point 1), to the thread the call was made on too, whose
// addresses the caller may hold, while that thread still sleeps in the
// call it was released behind (ErrnoHome::may_write_home): ErrnoHome for
// errno, home_h_errno for h_errno.
#pragma once

#include <locale.h>
#include <netdb.h>
#include <weft/blocking.h>

#include <optional>
#include <type_traits>

#include "../io/blocking_pool.h"
#include "../sched/current.h"
#include "announced.h"
#include "hook_support.h"
#include "real_calls.h"

namespace weft::detail {

// Runs fn() through `run(call, arg)`, which runs call(arg) on a helper and
// returns whether it did; nullopt, errno untouched, if it did not.
template <class Fn, class Run>
std::optional<std::invoke_result_t<Fn&>> offload_through(Fn& fn, Run&& run) {
  using Result = std::invoke_result_t<Fn&>;
  struct Call {
    Fn* fn;
    Result result;
    int error;
    int host_error;
    locale_t locale;
    static void run(void* self) noexcept {
      auto* call = static_cast<Call*>(self);
      const locale_t helpers = ::uselocale(call->locale);
      errno = call->error;
      h_errno = call->host_error;
      call->result = (*call->fn)();
      call->error = errno;
      call->host_error = h_errno;
      ::uselocale(helpers);
    }
  };
  const ErrnoHome home;
  int* const home_h_errno = h_errno_here();
  Call call{&fn, Result{}, errno_value(), *home_h_errno, ::uselocale(locale_t(0))};
  {
    const ParkScope park;
    if (!run(&Call::run, static_cast<void*>(&call))) return std::nullopt;
  }
  set_errno(call.error);
  *h_errno_here() = call.host_error;
  if (home.may_write_home()) *home_h_errno = call.host_error;
  return call.result;
}

// fn() on a helper, queued behind others while every helper is busy. With
// no helper, none able to start (a thread limit), on this thread,
// announced, as libc's call would run: a hook never throws.
template <class Fn>
auto offloaded(Fn&& fn) {
  const auto on_a_helper = offload_through(fn, [](void (*call)(void*), void* arg) {
    BlockingPool* pool = BlockingPool::find(*current_fiber()->scheduler);
    return pool != nullptr && pool->run_if_helper(call, arg) == 0;
  });
  return on_a_helper.has_value() ? *on_a_helper : announced(fn);
}

// fn() on a helper of `pool` if one is free at once
// (BlockingPool::run_wait_if_free), the fiber parked at `site`; nullopt,
// with nothing run, if none is.
template <class Fn>
auto offloaded_if_helper_free(BlockingPool& pool, Fn&& fn, const WaitSite& site) {
  return offload_through(fn, [&](void (*call)(void*), void* arg) { return pool.run_wait_if_free(call, arg, site); });
}

}  // namespace weft::detail
