#include "blocking_tracer.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../runtime/fast_clock.h"
#include "../runtime/log.h"
#include "../sched/scheduler_core.h"
#include "../sched/wait_owner.h"
#include "../sched/worker.h"
#include "kernel_wait.h"
#include "symbolizer.h"
#include "thread_stack.h"

namespace weft::detail {
namespace {

// WEFT_TRACE_BLOCKING in ms: 0 when unset or not a positive number.
long threshold_ms() {
  static const long ms = [] {
    const char* text = std::getenv("WEFT_TRACE_BLOCKING");
    if (text == nullptr || text[0] == '\0') return 0L;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (*end != '\0' || value <= 0 || value > 3'600'000) {
      log_message(LogLevel::warning,
                  "weft: WEFT_TRACE_BLOCKING=%s is not a number of milliseconds (1 to 3600000); ignored", text);
      return 0L;
    }
    return value;
  }();
  return ms;
}

class BlockingTracer {
 public:
  static BlockingTracer& the_tracer() {
    static BlockingTracer* const tracer = new BlockingTracer;  // never destroyed, as the dump server
    return *tracer;
  }

  void watch(SchedulerCore& core) {
    std::lock_guard guard(lock_);
    cores_.push_back(&core);
    if (thread_.joinable()) return;
    // Signals are the application's: the thread starts with all blocked.
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    try {
      stopping_ = false;
      thread_ = std::thread([this] { run(); });
    } catch (const std::system_error& e) {
      log_message(LogLevel::warning, "weft: WEFT_TRACE_BLOCKING is off: cannot start its thread: %s", e.what());
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }

  void unwatch(SchedulerCore& core) {
    std::thread ending;
    {
      std::lock_guard guard(lock_);
      cores_.erase(std::remove(cores_.begin(), cores_.end(), &core), cores_.end());
      for (auto it = seen_.begin(); it != seen_.end();) it = it->first.first == &core ? seen_.erase(it) : std::next(it);
      if (!cores_.empty() || !thread_.joinable()) return;
      stopping_ = true;
      ending = std::move(thread_);
    }
    wake_.notify_all();
    ending.join();
  }

 private:
  // What a worker was doing at the previous sample.
  struct Seen {
    std::uint64_t tick;  // its switch count: the same fiber while unchanged
    std::int64_t since_ns;
    bool reported;
  };

  void run() {
    pthread_setname_np(pthread_self(), "weft-trace-blk");
    const long limit = threshold_ms();
    const auto period = std::chrono::milliseconds(std::clamp(limit / 4, 1L, 50L));
    std::unique_lock guard(lock_);
    while (!stopping_) {
      for (SchedulerCore* core : cores_) sample(*core, limit);
      wake_.wait_for(guard, period, [&] { return stopping_; });
    }
  }

  void sample(SchedulerCore& core, long limit) {
    for (const auto& worker : core.workers()) {
      Worker& w = *worker;
      FiberControl* fiber = w.current();
      const std::uint64_t tick = w.switch_tick();
      const int tid = w.os_thread().id();
      const KernelWait call = fiber != nullptr ? read_kernel_wait(tid) : KernelWait{};
      const auto key = std::make_pair(&core, w.index());
      if (call.number < 0) {
        seen_.erase(key);
        continue;
      }
      const std::int64_t now = fast_now_ns();
      auto [it, fresh] = seen_.try_emplace(key, Seen{tick, now, false});
      if (!fresh && it->second.tick != tick) it->second = Seen{tick, now, false};
      Seen& seen = it->second;
      if (seen.reported || now - seen.since_ns < limit * 1'000'000) continue;
      seen.reported = true;
      // The fiber may switch out (and end) at any moment: its stack's
      // bounds are read quietly, and the walk is kept only if the switch
      // count stood still meanwhile.
      ExecutionContext context;
      if (!read_quietly(&fiber->context, &context, sizeof(context))) continue;
      const auto low = reinterpret_cast<std::uintptr_t>(context.stack_bottom);
      const std::vector<std::uintptr_t> stack = walk_blocked_stack(call.sp, call.pc, low, low + context.stack_size);
      if (w.switch_tick() != tick) continue;
      // Once per call site: where the code called into the kernel's wrapper.
      const std::uintptr_t site = stack.size() > 1 ? stack[1] : call.pc;
      if (!sites_.insert(site).second) continue;
      report(core, w, fiber, call, stack, static_cast<double>(now - seen.since_ns) / 1e6);
    }
  }

  static void report(SchedulerCore& core, const Worker& worker, const FiberControl* running, const KernelWait& call,
                     const std::vector<std::uintptr_t>& stack, double ms) {
    // Its id and name, read where it is sure to live: in the registry,
    // under its shard's lock.
    std::uint64_t id = 0;
    std::string name = "?";
    core.registry().for_each([&](const FiberControl& fiber) {
      if (&fiber != running) return;
      id = fiber.id;
      name = fiber.name();
    });
    std::string text = std::string("weft: WEFT_TRACE_BLOCKING: fiber #") + std::to_string(id) + " \"" + name +
                       std::string("\" has held worker ") + std::to_string(worker.index()) + " of \"" +
                       core.config().name + std::string("\" in the kernel for ") +
                       std::to_string(static_cast<long>(ms)) + " ms, in " + describe_kernel_wait(call) + "\n";
    for (const std::uintptr_t address : stack) {
      FrameSymbol s;
      char line[64];
      std::snprintf(line, sizeof(line), "0x%lx", static_cast<unsigned long>(address));
      text += "      at ";
      if (!symbolize(address, s)) {
        text += std::string(line) + "\n";
        continue;
      }
      text += s.function.empty() ? line : s.function;
      if (!s.file.empty())
        text += " (" + s.file.substr(s.file.rfind('/') + 1) + std::string(":") + std::to_string(s.line) + ")\n";
      else
        text += " (" + s.module.substr(s.module.rfind('/') + 1) + ")\n";
    }
    text.pop_back();  // the last line's newline: a message has none
    log_message(LogLevel::warning, "%s", text.c_str());
  }

  std::mutex lock_;  // everything below; held while sampling
  std::condition_variable wake_;
  std::vector<SchedulerCore*> cores_;
  std::map<std::pair<SchedulerCore*, unsigned>, Seen> seen_;
  std::set<std::uintptr_t> sites_;  // reported already: each once
  std::thread thread_;
  bool stopping_ = false;
};

}  // namespace

void trace_blocking_of(SchedulerCore& core) {
  if (threshold_ms() > 0) BlockingTracer::the_tracer().watch(core);
}

void stop_tracing_blocking_of(SchedulerCore& core) noexcept {
  if (threshold_ms() > 0) BlockingTracer::the_tracer().unwatch(core);
}

}  // namespace weft::detail
