// The context switch on its own, without a scheduler: a fresh context's
// start, switching back and forth, exiting, and what each context keeps.
#include "runtime/context.h"

#include <gtest/gtest.h>

#include <cfenv>
#include <cstdint>
#include <vector>

#include "runtime/stack.h"

namespace weft::detail {
namespace {

// One context besides the test's own thread, on a stack of its own. The
// entry reaches it through `current`: an entry gets no argument of ours.
struct TwoContexts {
  static inline TwoContexts* current = nullptr;

  explicit TwoContexts(ContextEntry entry, std::size_t misalign = 0)
      : stack(Stack::allocate(64 * 1024)), sanitizer_fiber(new_sanitizer_fiber()) {
    current = this;
    adopt_thread_context(main);
    // As the scheduler does: an earlier context's frames may have left this
    // address range poisoned for ASan.
    unpoison_stack(stack.bottom(), stack.usable_size());
    // `misalign` bytes short of the top: make_context must align for itself.
    make_context(other, stack.bottom(), stack.usable_size() - misalign, entry, sanitizer_fiber);
  }
  ~TwoContexts() {
    delete_sanitizer_fiber(sanitizer_fiber);
    current = nullptr;
  }

  // From the test's thread: run the other context until it switches back.
  void run_other() { switch_context(main, other, SwitchAction{}); }
  // From the other context.
  void back_to_main() { switch_context(other, main, SwitchAction{}); }
  // The entry's last act: `return exit_to_main();`.
  transfer_t exit_to_main() { return exit_context(other, main, SwitchAction{}); }

  Stack stack;
  void* sanitizer_fiber;
  ExecutionContext main;
  ExecutionContext other;
  std::vector<int> trace;
};

void start(transfer_t transfer) { complete_switch(TwoContexts::current->other, transfer); }

TEST(Context, AFreshContextRunsItsEntryAndExits) {
  TwoContexts contexts{[](transfer_t transfer) -> transfer_t {
    start(transfer);
    TwoContexts::current->trace.push_back(1);
    return TwoContexts::current->exit_to_main();
  }};
  contexts.trace.push_back(0);
  contexts.run_other();
  contexts.trace.push_back(2);
  EXPECT_EQ(contexts.trace, (std::vector<int>{0, 1, 2}));
}

// A third context, for the test below.
struct ThirdContext {
  Stack stack = Stack::allocate(64 * 1024);
  void* sanitizer_fiber = new_sanitizer_fiber();
  ExecutionContext context;
  ~ThirdContext() { delete_sanitizer_fiber(sanitizer_fiber); }
};
ThirdContext* third = nullptr;

// A finished context's last switch may start another fresh one, as a worker
// starts the next spawned fiber, and the action it carries runs there.
TEST(Context, ALastSwitchCanStartAFreshContextAndRunsItsAction) {
  ThirdContext next;
  third = &next;
  unpoison_stack(next.stack.bottom(), next.stack.usable_size());
  make_context(
      next.context, next.stack.bottom(), next.stack.usable_size(),
      [](transfer_t transfer) -> transfer_t {
        complete_switch(third->context, transfer);  // runs the first context's action
        TwoContexts::current->trace.push_back(3);
        return exit_context(third->context, TwoContexts::current->main, SwitchAction{});
      },
      next.sanitizer_fiber);
  TwoContexts contexts{[](transfer_t transfer) -> transfer_t {
    start(transfer);
    TwoContexts& self = *TwoContexts::current;
    self.trace.push_back(1);
    auto record = +[](void* arg) { static_cast<TwoContexts*>(arg)->trace.push_back(2); };
    return exit_context(self.other, third->context, SwitchAction{record, &self});
  }};
  contexts.run_other();
  contexts.trace.push_back(4);
  EXPECT_EQ(contexts.trace, (std::vector<int>{1, 2, 3, 4}));
  third = nullptr;
}

TEST(Context, SwitchingBackAndForthResumesEachWhereItLeft) {
  constexpr int kRounds = 1000;
  TwoContexts contexts{[](transfer_t transfer) -> transfer_t {
    start(transfer);
    TwoContexts& self = *TwoContexts::current;
    for (int i = 0; i < kRounds; ++i) {
      self.trace.push_back(2 * i + 1);
      self.back_to_main();
    }
    return self.exit_to_main();
  }};
  for (int i = 0; i <= kRounds; ++i) {
    contexts.trace.push_back(2 * i);
    contexts.run_other();
  }
  ASSERT_EQ(contexts.trace.size(), 2u * kRounds + 1);
  for (int i = 0; i <= 2 * kRounds; ++i) EXPECT_EQ(contexts.trace[i], i);
}

// The ABI wants rsp 16-byte aligned at every call, so a frame pointer is a
// multiple of 16; the stack handed to make_context ends anywhere.
TEST(Context, AFreshContextStartsOnAnAlignedStack) {
  for (std::size_t misalign : {0, 1, 8, 13}) {
    TwoContexts contexts{[](transfer_t transfer) -> transfer_t {
                           start(transfer);
                           const auto frame = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
                           TwoContexts::current->trace.push_back(static_cast<int>(frame % 16));
                           return TwoContexts::current->exit_to_main();
                         },
                         misalign};
    contexts.run_other();
    EXPECT_EQ(contexts.trace, (std::vector<int>{0})) << "stack misaligned by " << misalign;
  }
}

// Values the compiler keeps in callee-saved registers across the switch.
TEST(Context, ASwitchKeepsTheCallersLiveValues) {
  TwoContexts contexts{[](transfer_t transfer) -> transfer_t {
    start(transfer);
    volatile std::uint64_t clobber = 0;
    while (TwoContexts::current->trace.empty()) {
      // Use many registers on this side, then go back.
      std::uint64_t r[12];
      for (int i = 0; i < 12; ++i) r[i] = clobber * 31 + static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull;
      for (int i = 0; i < 12; ++i) clobber = clobber + r[i];
      TwoContexts::current->back_to_main();
    }
    return TwoContexts::current->exit_to_main();
  }};
  volatile std::uint64_t seed = 7;
  std::uint64_t a = seed, b = seed * 3, c = seed * 5, d = seed * 7, e = seed * 11, f = seed * 13;
  for (int round = 0; round < 100; ++round) {
    contexts.run_other();
    a += 1, b += 2, c += 3, d += 4, e += 5, f += 6;
  }
  EXPECT_EQ(a, 7u + 100);
  EXPECT_EQ(b, 21u + 200);
  EXPECT_EQ(c, 35u + 300);
  EXPECT_EQ(d, 49u + 400);
  EXPECT_EQ(e, 77u + 500);
  EXPECT_EQ(f, 91u + 600);
  contexts.trace.push_back(0);  // let it finish
  contexts.run_other();
}

// The floating-point control state (rounding, x87 precision) belongs to a
// context: a fresh one starts with its creator's, and a switch does not
// carry one context's changes into another.
TEST(Context, EachContextKeepsItsOwnFloatingPointModes) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the x86-64 switch saves MXCSR and the x87 control word; others may not";
#else
  ASSERT_EQ(std::fesetround(FE_UPWARD), 0);
  TwoContexts contexts{[](transfer_t transfer) -> transfer_t {
    start(transfer);
    TwoContexts& self = *TwoContexts::current;
    self.trace.push_back(std::fegetround());  // the creator's mode
    std::fesetround(FE_DOWNWARD);
    self.back_to_main();
    self.trace.push_back(std::fegetround());  // still its own
    return self.exit_to_main();
  }};
  contexts.run_other();
  contexts.trace.push_back(std::fegetround());  // main's, untouched
  std::fesetround(FE_TOWARDZERO);
  contexts.run_other();
  contexts.trace.push_back(std::fegetround());
  std::fesetround(FE_TONEAREST);
  EXPECT_EQ(contexts.trace, (std::vector<int>{FE_UPWARD, FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO}));
#endif
}

}  // namespace
}  // namespace weft::detail
