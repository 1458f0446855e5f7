// The owner lookups behind weft-dump's "(held by ...)" (sched/wait_owner.h)
// take any address: the dump reads a fiber's wait kind and object apart,
// so a lookup may get null or another wait's object (an fd's number). It
// must answer "nobody" there, in every build: under UBSan, naming a member
// through a null or misaligned pointer stops the process (the CI run at
// e8a0038 stopped so, in dump_deadlock_test).
#include "sched/wait_owner.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <weft/mutex.h>

#include <cstdint>

namespace {

using weft::detail::find_wait_owner;

void expect_nobody(const weft::detail::WaitOwner& owner) {
  EXPECT_EQ(owner.fiber, 0u);
  EXPECT_EQ(owner.thread, 0);
  EXPECT_EQ(owner.readers, 0u);
}

TEST(WaitOwner, NobodyHoldsANullOrMisalignedObjectOfAnyKind) {
  for (const char* kind : {"weft::Mutex", "weft::Fiber", "std::mutex", "std::shared_mutex"}) {
    SCOPED_TRACE(kind);
    expect_nobody(find_wait_owner(kind, nullptr));
    expect_nobody(find_wait_owner(kind, reinterpret_cast<const void*>(std::uintptr_t{5})));  // an fd's number
  }
}

TEST(WaitOwner, NamesTheThreadThatHoldsAWeftMutex) {
  weft::Mutex mutex;
  mutex.lock();
  const weft::detail::WaitOwner owner = find_wait_owner("weft::Mutex", &mutex);
  EXPECT_EQ(owner.thread, static_cast<int>(::gettid()));
  mutex.unlock();
  expect_nobody(find_wait_owner("weft::Mutex", &mutex));
}

}  // namespace
