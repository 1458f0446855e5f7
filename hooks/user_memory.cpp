#include "user_memory.h"

#include <cerrno>
#include <cstdint>

#include "../runtime/context.h"
#include "../runtime/fiber_control.h"
#include "../sched/futex.h"
#include "signal_handlers.h"

namespace weft::detail {
namespace {

// The smallest page Linux has: access is per page, so one word read tells
// at least this much.
constexpr std::uintptr_t kSmallestPage = 4096;

// A plain thread's stack, looked up at its first use (pthread_getattr_np,
// which allocates: never from a signal handler). Initial-exec: read in
// handlers, where a dynamic TLS lookup could allocate.
struct ThreadStack {
  const char* bottom = nullptr;
  const char* top = nullptr;
  bool looked = false;
};
[[gnu::tls_model("initial-exec")]] constinit thread_local ThreadStack thread_stack;

bool find_thread_stack(const char*& bottom, const char*& top) noexcept {
  if (!thread_stack.looked) {
    if (in_signal_handler()) return false;
    thread_stack.looked = true;
    void* base = nullptr;
    std::size_t size = 0;
    if (!thread_stack_bounds(base, size)) return false;
    thread_stack.bottom = static_cast<const char*>(base);
    thread_stack.top = thread_stack.bottom + size;
  }
  bottom = thread_stack.bottom;
  top = thread_stack.top;
  return top != nullptr;
}

// The kernel reads one aligned word of each page for a futex comparison
// (futex_compare: no wait, no wake) and answers EFAULT if it cannot. One
// word a page.
bool kernel_can_read(const void* from, std::size_t bytes) noexcept {
  const auto end = reinterpret_cast<std::uintptr_t>(from) + bytes;
  for (auto at = reinterpret_cast<std::uintptr_t>(from) & ~std::uintptr_t(3); at < end;
       at = (at | (kSmallestPage - 1)) + 1) {
    if (futex_compare(reinterpret_cast<const void*>(at), 0, false) == -EFAULT) return false;
  }
  return true;
}

}  // namespace

// Live memory. (Not when this frame is elsewhere, on a signal stack.)
bool on_live_stack(const void* from, std::size_t bytes) noexcept {
  const char* bottom = nullptr;
  const char* top = nullptr;
  if (const FiberControl* fiber = current_fiber()) {
    if (!fiber->stack) return false;
    bottom = fiber->stack.bottom();
    top = fiber->stack.top();
  } else if (!find_thread_stack(bottom, top)) {
    return false;
  }
  const auto* frame = static_cast<const char*>(__builtin_frame_address(0));
  const auto* at = static_cast<const char*>(from);
  return frame >= bottom && frame < top && at >= frame && at <= top && bytes <= std::size_t(top - at);
}

bool readable_by_kernel(const void* from, std::size_t bytes) noexcept {
  return bytes == 0 || on_live_stack(from, bytes) || kernel_can_read(from, bytes);
}

bool PiecesReadable::operator()(const void* from, std::size_t bytes) noexcept {
  const auto* first = static_cast<const char*>(from);
  if (known_page_ != nullptr && first >= known_page_ && first < known_page_ + kSmallestPage &&
      bytes <= std::size_t(known_page_ + kSmallestPage - first))
    return true;
  if (!readable_by_kernel(from, bytes)) return false;
  if (bytes != 0)
    known_page_ =
        reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(first + bytes - 1) & ~(kSmallestPage - 1));
  return true;
}

}  // namespace weft::detail
