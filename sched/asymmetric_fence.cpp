#include "asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../runtime/system_calls.h"

namespace weft::detail {
namespace {

long membarrier(int command) noexcept { return sys::call(SYS_membarrier, command, 0, 0); }

bool register_expedited() noexcept {
  const long commands = membarrier(MEMBARRIER_CMD_QUERY);
  if (commands < 0 || (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

}  // namespace

bool heavy_fence_available() noexcept {
  static const bool available = register_expedited();
  return available;
}

void heavy_fence() noexcept {
  // Cannot fail once registered; a full fence on this CPU as well.
  membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace weft::detail
