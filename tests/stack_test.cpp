// Stacks: guard pages, pooling, overflow reporting and mapping failures.
#include "runtime/stack.h"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fork_children.h"
#include "stack_frames.h"
#include "test_support.h"

namespace weft {
namespace {

TEST(Stack, GuardPageSitsBelowTheUsableRange) {
  detail::Stack stack = detail::Stack::allocate(64 * 1024);
  EXPECT_GE(stack.usable_size(), 64u * 1024);
  EXPECT_TRUE(stack.guard_contains(stack.bottom() - 1));
  EXPECT_FALSE(stack.guard_contains(stack.bottom()));
  std::memset(stack.bottom(), 0xab, stack.usable_size());  // all of it is writable
}

TEST(Stack, PoolReusesReleasedStacks) {
  detail::StackPool pool{64 * 1024, 2, 1};
  detail::Stack a = pool.acquire();
  char* top = a.top();
  pool.release(std::move(a));
  detail::Stack b = pool.acquire();
  EXPECT_EQ(b.top(), top);
  detail::Stack other_size = pool.acquire(128 * 1024);
  EXPECT_GE(other_size.usable_size(), 128u * 1024);
  // A worker's own cache hands back what that worker released.
  char* cached_top = b.top();
  pool.release(std::move(b), 0);
  EXPECT_EQ(pool.acquire(0, 0).top(), cached_top);
}

// /proc/self/maps's lines: the process's mappings.
std::size_t mappings_of_this_process() {
  std::ifstream maps("/proc/self/maps");
  std::size_t lines = 0;
  for (std::string line; std::getline(maps, line);) ++lines;
  return lines;
}

// Before Linux 6.13 (emulated here: madvise(MADV_GUARD_INSTALL) refused
// with EINVAL, as older kernels refuse it) each stack's guard is a mapping
// of its own. A pool that kept every stack of a burst of fibers (its
// capacity is 65,536) left the process out of mappings once they ended:
// std::thread failed for good. It keeps an eighth of vm.max_map_count's
// stacks there, a quarter of the mappings. In a child, for the filter.
TEST(Stack, WithGuardsMappedApartThePoolKeepsAQuarterOfTheMappings) {
  std::size_t max_map_count = 0;
  std::ifstream("/proc/sys/vm/max_map_count") >> max_map_count;
  if (max_map_count == 0 || max_map_count > 65'530)
    GTEST_SKIP() << "vm.max_map_count " << max_map_count << ": the burst would take too many fibers";
  // ThreadSanitizer keeps a fiber of its own per stack (more mappings),
  // and stops near 8,192 live ones.
  SKIP_UNDER_TSAN();
  SKIP_IF_CHILDREN_CANNOT_ALLOCATE();
  const std::size_t fibers = max_map_count / 8 + 2'000;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // madvise(..., MADV_GUARD_INSTALL = 102) fails with EINVAL; every other
    // call, and every other madvise, is allowed.
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_madvise, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args) + 2 * sizeof(std::uint64_t)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 102, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    const sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0)
      ::_exit(3);
    Config config = test::config_with(2);
    config.stack_size = 16 * 1024;
    Scheduler sched{config};
    const std::size_t before = mappings_of_this_process();
    {
      // Every fiber alive at once, each on a stack of its own, before any ends.
      Latch started{static_cast<std::int64_t>(fibers)};
      Latch ended(1);
      std::vector<Fiber> burst;
      burst.reserve(fibers);
      for (std::size_t i = 0; i < fibers; ++i)
        burst.push_back(sched.spawn([&] {
          started.count_down();
          ended.wait();
        }));
      started.wait();
      ended.count_down();
      for (Fiber& fiber : burst) fiber.join();
    }
    const std::size_t kept = mappings_of_this_process() - before;
    std::printf("mappings kept after %zu fibers: %zu (vm.max_map_count %zu)\n", fibers, kept, max_map_count);
    ::_exit(kept <= max_map_count / 4 + 600 ? 0 : 4);  // 600: the workers' own caches, 64 stacks each
  }
  EXPECT_EQ(test::child_exit_status(child, std::chrono::seconds(120)), 0)
      << "-1: a signal or the time limit; 3: no seccomp filter; 4: more mappings kept than a quarter";
}

TEST(Stack, PerSpawnStackSize) {
  Scheduler s{test::config_with(1)};
  // 1 MiB of locals needs more than the 256 KiB default.
  s.spawn({.name = "big", .stack_size = 2 * 1024 * 1024}, [] {
     volatile char buffer[1024 * 1024];
     buffer[0] = 1;
     buffer[sizeof(buffer) - 1] = 2;
     EXPECT_EQ(buffer[0] + buffer[sizeof(buffer) - 1], 3);
   }).join();
}

// One rule for every stack size, with one message. Before: 8 and 12 KiB
// were accepted (printf then overflowed), 1 and 4096 bytes refused as "the
// fiber's callable does not fit", and SIZE_MAX - 100 wrapped in the page
// rounding.
TEST(Stack, BadSpawnStackSizesAreRefusedByOneRule) {
  Scheduler s{test::config_with(1)};
  for (const std::size_t bad : {std::size_t{1}, std::size_t{4096}, std::size_t{8192}, std::size_t{12 * 1024},
                                std::size_t{16 * 1024 - 1}, (std::size_t{1} << 40) + 1, SIZE_MAX - 100, SIZE_MAX}) {
    try {
      s.spawn({.stack_size = bad}, [] {}).join();
      ADD_FAILURE() << "a stack of " << bad << " bytes was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_STREQ(e.what(), ("weft: SpawnOptions::stack_size (0: Config::stack_size) must be at least 16 KiB and "
                              "at most 1 TiB, got " +
                              std::to_string(bad) + " bytes")
                                 .c_str());
    }
  }
  // The smallest allowed stack runs a fiber that calls printf.
  s.spawn({.stack_size = 16 * 1024}, [] { std::printf("%s %d %f\n", "on 16 KiB", 16, 16.0); }).join();
  Config tiny = test::config_with(1);
  tiny.stack_size = 12 * 1024;
  EXPECT_THROW(Scheduler{tiny}, std::invalid_argument);
  tiny.stack_size = SIZE_MAX - 100;
  EXPECT_THROW(Scheduler{tiny}, std::invalid_argument);
  EXPECT_THROW(detail::Stack::allocate(SIZE_MAX - 100), std::invalid_argument);
}

TEST(Stack, ACallableTooBigForItsStackIsNamed) {
  Scheduler s{test::config_with(1)};
  struct Big {
    char bytes[20 * 1024] = {};
    void operator()() const {}
  };
  try {
    s.spawn({.stack_size = 16 * 1024}, Big{}).join();
    ADD_FAILURE() << "a 20 KiB callable was put on a 16 KiB stack";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("callable (20480 bytes) does not fit on its stack of 16 KiB"),
              std::string::npos)
        << e.what();
  }
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// The frames below let their buffers escape into an empty asm, so that no
// compiler may shrink them: Clang 14 cut a volatile array touched at two
// constant indices down to those two bytes (see stack_frames.cpp), and its
// "big" frames never reached the guard.
[[gnu::noinline]] int recurse(int depth) {
  char frame[512];
  asm volatile("" : : "r"(frame) : "memory");
  static_cast<volatile char*>(frame)[0] = static_cast<char>(depth);
  if (depth == -1) return 0;  // never: keeps the compiler from calling this infinite
  return recurse(depth + 1) + static_cast<volatile char*>(frame)[0];
}

TEST(StackDeathTest, OverflowNamesTheFiber) {
  if (kSanitized) GTEST_SKIP() << "the sanitizers report the overflow themselves";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Scheduler s{test::config_with(1)};
        s.spawn({.name = "rpc-3"}, [] { recurse(0); }).join();
      },
      "weft: stack overflow in fiber \"rpc-3\" #[0-9]+");
}

// A 72 KiB frame on a 64 KiB stack, in code built without stack-clash
// probing: with a one-page guard its first write landed below the guard,
// in the neighbouring stack (silently) or in unmapped memory (a bare
// SIGSEGV). The 64 KiB guard region catches it, and names the fiber.
TEST(StackDeathTest, AnUnprobedFrameBiggerThanAPageIsCaught) {
  if (kSanitized) GTEST_SKIP() << "the sanitizers report the overflow themselves";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Scheduler s{test::config_with(1)};
        BlockingQueue<int> go;
        BlockingQueue<int> never;
        Fiber big = s.spawn({.name = "big-frame", .stack_size = 64 * 1024}, [&] {
          go.take();
          char here = 0;
          (void)test::unprobed_72k_frame(1, &here);
        });
        // Mapped after it, so (top-down mmap) most likely just below it: the
        // stack an unguarded overflow would write into.
        s.spawn({.name = "neighbour", .stack_size = 64 * 1024}, [&] { never.take(); }).detach();
        go.put(1);
        big.join();
        std::fprintf(stderr, "no overflow reported\n");
        std::_Exit(0);
      },
      "weft: stack overflow in fiber \"big-frame\" #[0-9]+ \\(stack of 64 KiB, a frame reached [0-9]+ KiB below it");
}

// Stack-clash probing (in libweft's and this test's flags, and in weft.pc's
// Cflags) touches every page of a frame from the top: a frame far bigger
// than the guard still faults in it first.
// Returns how far below `caller` its buffer's lowest byte lay.
[[gnu::noinline]] std::size_t probed_frame(int seed, const void* caller) {
  char buffer[1024 * 1024];
  asm volatile("" : : "r"(buffer) : "memory");
  static_cast<volatile char*>(buffer)[0] = static_cast<char>(seed);
  asm volatile("" : : "r"(buffer) : "memory");
  return static_cast<std::size_t>(static_cast<const char*>(caller) - buffer);
}

// The death tests below are only as good as their frames: each is as big
// as its name under every compiler (on a stack big enough for it), so a
// build that shrinks them fails here rather than passing there by luck.
TEST(Stack, TheBigTestFramesAreAsBigAsTheirNames) {
  // ASan may put locals on a fake stack of its own; the death tests that
  // use these frames are skipped there anyway.
  if (kSanitized) GTEST_SKIP() << "the sanitizers may move locals off the stack";
  Scheduler s{test::config_with(1)};
  std::size_t unprobed = 0;
  std::size_t probed = 0;
  s.spawn({.stack_size = 4 * 1024 * 1024}, [&] {
     char here = 0;
     unprobed = test::unprobed_72k_frame(1, &here);
     probed = probed_frame(1, &here);
   }).join();
  EXPECT_GE(unprobed, 72u * 1024);
  EXPECT_LT(unprobed, 80u * 1024);  // the caller's frame is small
  EXPECT_GE(probed, 1024u * 1024);
  EXPECT_LT(probed, 1024u * 1024 + 8 * 1024);
}

TEST(StackDeathTest, AProbedFrameBiggerThanTheGuardIsCaught) {
  if (kSanitized) GTEST_SKIP() << "the sanitizers report the overflow themselves";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Scheduler s{test::config_with(1)};
        s.spawn({.name = "huge-frame", .stack_size = 64 * 1024}, [] {
           char here = 0;
           (void)probed_frame(1, &here);
         }).join();
        std::fprintf(stderr, "no overflow reported\n");
      },
      "weft: stack overflow in fiber \"huge-frame\" #[0-9]+");
}

// What the handler takes for an overflow: a fault in the guard, or a stack
// pointer below the usable range (up to kOvershootReach), wherever the
// fault itself landed; nothing above the guard, nor a stack pointer that is
// elsewhere altogether.
TEST(Stack, OverflowIsTheGuardOrAStackPointerBelowTheStack) {
  detail::Stack stack = detail::Stack::allocate(64 * 1024);
  char* bottom = stack.bottom();
  char* mid = bottom + 32 * 1024;
  EXPECT_GE(detail::Stack::guard_size(), detail::kGuardBytes);
  EXPECT_TRUE(stack.overflowed(bottom - 1, mid));
  EXPECT_TRUE(stack.overflowed(bottom - detail::Stack::guard_size(), mid));
  EXPECT_FALSE(stack.overflowed(bottom - detail::Stack::guard_size() - 1, mid));  // not ours
  EXPECT_FALSE(stack.overflowed(bottom, mid));
  EXPECT_FALSE(stack.overflowed(nullptr, mid));
  // A frame bigger than the guard: the fault is below the guard, in what
  // may be unmapped memory, and so is the stack pointer.
  char* far_below = bottom - detail::Stack::guard_size() - 1024 * 1024;
  EXPECT_TRUE(stack.overflowed(far_below, far_below + 64));
  EXPECT_TRUE(stack.overflowed(nullptr, bottom - 8));
  EXPECT_FALSE(stack.overflowed(far_below, bottom - detail::kOvershootReach - 4096));
  EXPECT_FALSE(stack.overflowed(far_below, nullptr));
  EXPECT_FALSE(stack.overflowed(far_below, stack.top() + 4096));
}

TEST(StackDeathTest, OtherFaultsKeepTheirDefaultAction) {
  if (kSanitized) GTEST_SKIP() << "the sanitizers report the fault themselves";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Scheduler s{test::config_with(1)};
        s.spawn([] {
           volatile int* null = nullptr;
           *null = 1;
         }).join();
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

// A SIGSEGV or SIGBUS sent (kill, raise) rather than raised by a fault has
// no faulting instruction to run again: weft's handler sends it once more
// with the default action back. Before, the first one sent was lost.
TEST(StackDeathTest, ASentFaultSignalKeepsItsDefaultAction) {
  if (kSanitized) GTEST_SKIP() << "the sanitizers handle SIGSEGV themselves";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const int signal : {SIGSEGV, SIGBUS}) {
    EXPECT_EXIT(
        {
          Scheduler s{test::config_with(1)};
          ::kill(::getpid(), signal);
          std::exit(0);
        },
        ::testing::KilledBySignal(signal), "")
        << strsignal(signal) << " sent to the process";
    EXPECT_EXIT(
        {
          Scheduler s{test::config_with(1)};
          s.spawn([signal] { ::raise(signal); }).join();
          std::exit(0);
        },
        ::testing::KilledBySignal(signal), "")
        << strsignal(signal) << " raised in a fiber";
  }
}

// A SIGSEGV handler installed before weft's (which handles the faults that
// are not a fiber's overflow by calling it) runs as the kernel would run
// it: with its flags. Before, it ran with weft's: an SA_NODEFER handler
// that longjmps out of a probe left SIGSEGV blocked, and the second probe
// killed the process; an SA_RESETHAND handler that returned ran again at
// every retry of the fault, for good.
std::jmp_buf* probe_return = nullptr;
void return_from_the_probe(int) { std::longjmp(*probe_return, 1); }

[[gnu::noinline]] bool readable(const volatile int* address) {
  std::jmp_buf here;
  probe_return = &here;
  if (setjmp(here) == 0) {
    (void)*address;
    return true;
  }
  return false;
}

TEST(StackDeathTest, AFaultHandlerInstalledBeforeWeftsKeepsItsFlags) {
  if (kSanitized) GTEST_SKIP() << "the sanitizers handle SIGSEGV themselves";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        struct sigaction probe {};
        probe.sa_handler = &return_from_the_probe;
        probe.sa_flags = SA_NODEFER;
        sigemptyset(&probe.sa_mask);
        sigaction(SIGSEGV, &probe, nullptr);
        Scheduler s{test::config_with(1)};
        const void* none = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        int unreadable = 0;
        s.spawn([&] {
           for (int i = 0; i < 3; ++i)
             if (!readable(static_cast<const volatile int*>(none))) ++unreadable;
         }).join();
        std::fprintf(stderr, "unreadable %d\n", unreadable);
        std::exit(unreadable == 3 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "unreadable 3");
  EXPECT_EXIT(
      {
        struct sigaction once {};
        once.sa_handler = [](int) {
          static const char text[] = "handled once\n";
          (void)!::write(STDERR_FILENO, text, sizeof(text) - 1);
        };
        once.sa_flags = SA_RESETHAND;
        sigemptyset(&once.sa_mask);
        sigaction(SIGSEGV, &once, nullptr);
        ::alarm(20);  // a handler run at every retry never ends
        Scheduler s{test::config_with(1)};
        s.spawn([] {
           volatile int* null = nullptr;
           *null = 1;
         }).join();
      },
      ::testing::KilledBySignal(SIGSEGV), "handled once");
}

// An SA_ONSTACK handler raised in a fiber runs on its worker's alternate
// stack (a plain thread without one runs it on its own stack): that has
// room for a handler that uses 200 KiB, and one that uses far more dies of
// SIGSEGV at its guard instead of writing below it. Before, 64 KiB and no
// guard: the 200 KiB handler wrote over the mappings below and crashed.
template <std::size_t kBytes>
void use_stack_on_signal(int) {
  volatile char frame[kBytes];
  // From the top down, a page at a time, as a growing stack is touched:
  // the guard page is met before anything below it.
  for (std::size_t i = kBytes; i >= 512; i -= 512) frame[i - 1] = char(i);
  (void)frame[0];
}

template <std::size_t kBytes>
void raise_in_a_fiber_with_a_handler_of() {
  struct sigaction on_stack {};
  on_stack.sa_handler = &use_stack_on_signal<kBytes>;
  on_stack.sa_flags = SA_ONSTACK;
  sigemptyset(&on_stack.sa_mask);
  sigaction(SIGUSR1, &on_stack, nullptr);
  Scheduler s{test::config_with(1)};
  s.spawn([] { ::raise(SIGUSR1); }).join();
  std::fprintf(stderr, "handled\n");
  std::exit(0);
}

TEST(StackDeathTest, AnOnStackSignalHandlerHasRoomAndAGuard) {
  if (kSanitized) GTEST_SKIP() << "the sanitizers keep alternate stacks of their own";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(raise_in_a_fiber_with_a_handler_of<200 * 1024>(), ::testing::ExitedWithCode(0), "handled");
  EXPECT_EXIT(raise_in_a_fiber_with_a_handler_of<4 * 1024 * 1024>(), ::testing::KilledBySignal(SIGSEGV), "");
}

// Runs in the death test's child: limits the address space, then asks
// for a stack that cannot fit.
void spawn_beyond_address_space() {
  Scheduler s{test::config_with(1)};
  const rlimit limit{1ull << 30, 1ull << 30};  // 1 GiB of address space
  setrlimit(RLIMIT_AS, &limit);
  try {
    s.spawn({.stack_size = 4ull << 30}, [] {}).join();  // 4 GiB cannot map
  } catch (const StackError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(3);
  }
  std::exit(0);
}

TEST(StackDeathTest, OutOfAddressSpaceIsAClearError) {
  if (kSanitized) GTEST_SKIP() << "the sanitizers reserve address space of their own";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(spawn_beyond_address_space(), ::testing::ExitedWithCode(3), "cannot map a fiber stack of 4194304 KiB");
}

// The process's address space (VmSize), in bytes.
std::size_t address_space() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0;
  statm >> pages;
  return pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// A fiber takes its stack when it first runs (SchedulerCore::start_fiber),
// so fibers spawned and not yet run hold none: here 10,000 of them, behind
// their spawner on the one worker. With a stack each taken at spawn they
// took 320 KiB of address space each (the stack and its guard). Nothing
// else runs meanwhile, neither a spawned fiber (no preemption: under TSan the
// loop takes several seconds) nor a spare: what runs may make the
// sanitizer's runtime map memory of its own (TSan mapped 304,872 KiB more in
// about 1 run of 6, while the spawner was preempted).
TEST(Stack, FibersThatHaveNotRunHoldNoStack) {
  Config config = test::config_with(1);
  config.preemption = false;
  config.max_threads = config.workers;
  Scheduler s{config};
  s.spawn([] {
     constexpr std::size_t kFibers = 10'000;
     std::vector<Fiber> fibers;
     fibers.reserve(kFibers);
     const std::size_t before = address_space();
     for (std::size_t i = 0; i < kFibers; ++i) fibers.push_back(weft::spawn([] {}));
     const std::size_t grown = address_space() - before;
     EXPECT_LT(grown, kFibers * Config{}.stack_size / 10) << grown / 1024 << " KiB more address space";
     for (Fiber& fiber : fibers) fiber.join();
   }).join();
}

// Runs in the death test's child: a scheduler whose default stacks can no
// longer be mapped. Fibers of that size are spawned, and fail only when
// they would first run: each ends with the StackError, which join()
// rethrows (or, detached, goes to the unhandled-exception handler), its
// callable destroyed without being called. Exits 3 if all went so.
void start_beyond_address_space() {
  Config config = test::config_with(1);
  config.stack_size = 4ull << 30;  // 4 GiB: cannot map below the limit
  std::atomic<int> reported{0};
  config.on_unhandled_exception = [&](std::string_view, std::uint64_t, std::exception_ptr error) {
    try {
      std::rethrow_exception(error);
    } catch (const StackError&) {
      reported.fetch_add(1);
    } catch (...) {
    }
  };
  Scheduler s{config};
  const rlimit limit{1ull << 30, 1ull << 30};  // 1 GiB of address space
  setrlimit(RLIMIT_AS, &limit);
  auto token = std::make_shared<int>(0);  // each callable holds a copy
  std::atomic<int> ran{0}, failed{0};
  const auto expect_stack_error = [&](Fiber& fiber) {
    try {
      fiber.join();
    } catch (const StackError& e) {
      if (std::string(e.what()).find("cannot map a fiber stack of 4194304 KiB") != std::string::npos)
        failed.fetch_add(1);
    }
  };
  // From a plain thread: the spawn succeeds.
  Fiber from_thread = s.spawn([token, &ran] { ran.fetch_add(1); });
  expect_stack_error(from_thread);
  // From a fiber on a stack of its own size (taken at spawn): the failed
  // start is met on this fiber's stack, as it parks to join or yields.
  s.spawn({.stack_size = 64 * 1024}, [&] {
     Fiber joined = weft::spawn([token, &ran] { ran.fetch_add(1); });
     expect_stack_error(joined);
     Fiber yielded_to = weft::spawn([token, &ran] { ran.fetch_add(1); });
     this_fiber::yield();
     expect_stack_error(yielded_to);
     weft::spawn([token, &ran] { ran.fetch_add(1); }).detach();
   }).join();
  test::wait_until([&] { return reported.load() == 1; });
  std::fprintf(stderr, "ran %d, failed %d, reported %d, callables left %ld\n", ran.load(), failed.load(),
               reported.load(), token.use_count() - 1);
  std::exit(ran.load() == 0 && failed.load() == 3 && reported.load() == 1 && token.use_count() == 1 ? 3 : 1);
}

TEST(StackDeathTest, AStackThatCannotBeMappedAtTheFirstRunFailsTheJoin) {
  if (kSanitized) GTEST_SKIP() << "the sanitizers reserve address space of their own";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(start_beyond_address_space(), ::testing::ExitedWithCode(3),
              "ran 0, failed 3, reported 1, callables left 0");
}

}  // namespace
}  // namespace weft
