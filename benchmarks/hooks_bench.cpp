// hooks: what libweft's libc hooks add to a call that does not park (a
// plain thread, or no scheduler at all): the hooked read() against the
// real read() behind it (hooks/real_calls.h), on the same 1-byte read of
// /dev/zero, and fcntl(F_GETFD), the cheapest tracked call. The
// difference per call is the hook's cost; the target is <= 5 ns
// (docs/io.md, docs/benchmarks.md). A system call's own noise on a loaded
// machine (several ns) hides that difference, so BM_HookPassThroughDecision
// times what a hook adds without the kernel: the decision not to park and
// the load of the real function's pointer.
//
// The BM_Fiber* pair makes the same reads in a fiber (one worker), where a
// hooked call that does not park is also a checkpoint (hooks/hook_support.h,
// hook_checkpoint): the difference is what that costs with no preemption
// pending, one relaxed load and a branch. The kernel's noise hides that
// too, so BM_FiberZeroNanosleep times a hooked call that makes no system
// call at all: nanosleep of zero in a fiber returns from the hook.
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>

#include "bench_support.h"
#include "hooks/hook_support.h"
#include "hooks/real_calls.h"

namespace {

struct DevZero {
  int fd = open("/dev/zero", O_RDONLY);
  ~DevZero() { close(fd); }
};

void BM_HookedRead(benchmark::State& state) {
  DevZero zero;
  char byte;
  for (auto _ : state) benchmark::DoNotOptimize(read(zero.fd, &byte, 1));
}
BENCHMARK(BM_HookedRead)->MinTime(0.5);

void BM_RealRead(benchmark::State& state) {
  DevZero zero;
  char byte;
  auto* real_read = weft::detail::real::read();
  for (auto _ : state) benchmark::DoNotOptimize(real_read(zero.fd, &byte, 1));
}
BENCHMARK(BM_RealRead)->MinTime(0.5);

constexpr int kFiberReads = 100'000;

// The worker thread's CPU time, read in the fiber (one worker, so the
// fiber stays on it): on a loaded machine the wall clock mostly measures
// the wait for a CPU, so the fiber cases also report cpu_per_call.
std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Runs `calls` in a fiber of `sched` and adds the CPU time it took to `cpu_ns`.
template <class Calls>
void timed_in_fiber(weft::Scheduler& sched, std::int64_t& cpu_ns, Calls&& calls) {
  weft_bench::run_in_fiber(sched, [&] {
    const std::int64_t start = thread_cpu_ns();
    calls();
    cpu_ns += thread_cpu_ns() - start;
  });
}

void report(benchmark::State& state, std::int64_t cpu_ns) {
  const double calls = 1.0 * kFiberReads * static_cast<double>(state.iterations());
  state.counters["per_call"] = weft_bench::time_per(calls);
  state.counters["cpu_per_call_ns"] = static_cast<double>(cpu_ns) / calls;
}

// kFiberReads one-byte reads of /dev/zero by `read_one` in a fiber.
template <class ReadOne>
void fiber_reads(benchmark::State& state, ReadOne read_one) {
  auto sched = weft_bench::make_scheduler(1);
  DevZero zero;
  std::int64_t cpu_ns = 0;
  for (auto _ : state) {
    timed_in_fiber(*sched, cpu_ns, [&] {
      char byte;
      for (int i = 0; i < kFiberReads; ++i) benchmark::DoNotOptimize(read_one(zero.fd, &byte, 1));
    });
  }
  report(state, cpu_ns);
}

void BM_FiberHookedRead(benchmark::State& state) {
  fiber_reads(state, [](int fd, char* b, size_t n) { return read(fd, b, n); });
}
BENCHMARK(BM_FiberHookedRead)->UseRealTime()->MinTime(0.5);

void BM_FiberRealRead(benchmark::State& state) { fiber_reads(state, weft::detail::real::read()); }
BENCHMARK(BM_FiberRealRead)->UseRealTime()->MinTime(0.5);

void BM_FiberZeroNanosleep(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(1);
  std::int64_t cpu_ns = 0;
  for (auto _ : state) {
    timed_in_fiber(*sched, cpu_ns, [] {
      const timespec zero{0, 0};
      for (int i = 0; i < kFiberReads; ++i) benchmark::DoNotOptimize(nanosleep(&zero, nullptr));
    });
  }
  report(state, cpu_ns);
}
BENCHMARK(BM_FiberZeroNanosleep)->UseRealTime()->MinTime(0.5);

void BM_HookedFcntlGetfd(benchmark::State& state) {
  DevZero zero;
  for (auto _ : state) benchmark::DoNotOptimize(fcntl(zero.fd, F_GETFD));
}
BENCHMARK(BM_HookedFcntlGetfd)->MinTime(0.5);

void BM_RealFcntlGetfd(benchmark::State& state) {
  DevZero zero;
  auto* real_fcntl = weft::detail::real::fcntl64();
  for (auto _ : state) benchmark::DoNotOptimize(real_fcntl(zero.fd, F_GETFD));
}
BENCHMARK(BM_RealFcntlGetfd)->MinTime(0.5);

void BM_HookPassThroughDecision(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(weft::detail::parking_enabled());
    benchmark::DoNotOptimize(weft::detail::real::read());
  }
}
BENCHMARK(BM_HookPassThroughDecision)->MinTime(0.5);

}  // namespace
