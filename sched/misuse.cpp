#include <sys/syscall.h>
#include <unistd.h>
#include <weft/detail/misuse.h>

#include <cstdio>
#include <cstdlib>

#include "../runtime/fiber_control.h"
#include "../runtime/log.h"
#include "../runtime/system_calls.h"
#include "fork_generation.h"

namespace weft::detail {

void describe_caller(char* out, std::size_t size) noexcept {
  if (FiberControl* fiber = current_fiber()) {
    char name[48];
    fiber->copy_name(name, sizeof name);
    std::snprintf(out, size, "fiber \"%s\" #%llu", name, static_cast<unsigned long long>(fiber->id));
  } else {
    std::snprintf(out, size, "thread %ld", static_cast<long>(sys::call(SYS_gettid)));
  }
}

namespace {

// Never true outside a fork child: there no waiter counts as the parent's.
bool only_the_parents_waiters(const WaitList& waiters, const WaitList* more) noexcept {
  for (const WaitList* list : {&waiters, more}) {
    if (list == nullptr) continue;
    for (const Waiter* w = list->front(); w != nullptr; w = w->next)
      if (!left_by_the_parent(*w)) return false;
  }
  return true;
}

}  // namespace

void abort_if_waited_on(const char* kind, const void* object, const WaitList& waiters, const WaitList* more) noexcept {
  if (only_the_parents_waiters(waiters, more)) return;
  // At most this many waiters are named; the count covers them all.
  constexpr std::size_t kNamed = 8;
  char caller[96];
  describe_caller(caller, sizeof caller);
  std::size_t count = 0;
  char named[kNamed * 72] = "";
  std::size_t used = 0;
  for (const WaitList* list : {&waiters, more}) {
    if (list == nullptr) continue;
    for (const Waiter* w = list->front(); w != nullptr; w = w->next, ++count) {
      if (count >= kNamed || used >= sizeof named) continue;
      char who[72];
      if (w->fiber != nullptr) {
        char name[48];
        w->fiber->copy_name(name, sizeof name);
        std::snprintf(who, sizeof who, "%sfiber \"%s\" #%llu", count == 0 ? "" : ", ", name,
                      static_cast<unsigned long long>(w->fiber->id));
      } else {
        std::snprintf(who, sizeof who, "%sa plain thread", count == 0 ? "" : ", ");
      }
      used += static_cast<std::size_t>(std::snprintf(named + used, sizeof named - used, "%s", who));
    }
  }
  log_message(LogLevel::fatal, "weft: %s@%p destroyed by %s while %zu caller(s) wait on it: %s%s", kind, object, caller,
              count, named, count > kNamed ? ", ..." : "");
  std::abort();
}

}  // namespace weft::detail
