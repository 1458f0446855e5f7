#include "threads.h"

#include "../pool/thread_registry.h"
#include "../runtime/fast_clock.h"
#include "kernel_wait.h"
#include "thread_stack.h"

namespace weft::detail {

std::vector<ThreadSnapshot> snapshot_threads() {
  std::vector<ThreadSnapshot> out;
  for_each_listed_thread([&](const ListedThread& listed) {
    ThreadSnapshot& t = out.emplace_back();
    t.name = listed.name;
    t.os_thread_id = listed.tid;
    t.kind = listed.kind;
    t.pool = listed.pool;
    t.state = thread_state_name(listed.tid);
    const std::int64_t since = listed.task_since_ns.load(std::memory_order_relaxed);
    const std::int64_t now = fast_now_ns();
    if (since != 0 && now >= since) t.task_ms = static_cast<double>(now - since) / 1e6;
    const KernelWait call = read_kernel_wait(listed.tid);
    if (call.number >= 0) {
      t.syscall = describe_kernel_wait(call, listed.wait);
      t.syscall_ms = off_cpu_ms(listed.tid);
      t.stack = walk_blocked_stack(call.sp, call.pc, listed.stack_low, listed.stack_high);
    }
  });
  return out;
}

}  // namespace weft::detail
