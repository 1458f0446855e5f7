#include "wait_owner.h"

#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "../runtime/fiber_control.h"

namespace weft::detail {
namespace {

// A fixed table, constant-initialized, so that registering from a static
// initializer needs no other static to exist yet. Entries are only added
// (or their lookup replaced), never removed: the snapshot reads it without
// a lock.
struct Entry {
  std::atomic<const char*> kind{nullptr};
  std::atomic<WaitOwnerLookup> lookup{nullptr};
};
constinit Entry table[kMaxWaitOwnerKinds];
constinit std::atomic<std::size_t> used{0};
constinit std::atomic_flag adding = ATOMIC_FLAG_INIT;  // serializes registrations

}  // namespace

bool register_wait_owner(const char* kind, WaitOwnerLookup lookup) noexcept {
  while (adding.test_and_set(std::memory_order_acquire)) {
  }
  bool done = false;
  const std::size_t n = used.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < n && !done; ++i) {
    if (std::strcmp(table[i].kind.load(std::memory_order_relaxed), kind) == 0) {
      table[i].lookup.store(lookup, std::memory_order_release);
      done = true;
    }
  }
  if (!done && n < kMaxWaitOwnerKinds) {
    table[n].lookup.store(lookup, std::memory_order_relaxed);
    table[n].kind.store(kind, std::memory_order_relaxed);
    used.store(n + 1, std::memory_order_release);  // publishes the entry
    done = true;
  }
  adding.clear(std::memory_order_release);
  return done;
}

WaitOwner find_wait_owner(const char* kind, const void* object) noexcept {
  if (kind == nullptr || object == nullptr) return {};
  const std::size_t n = used.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    if (std::strcmp(table[i].kind.load(std::memory_order_relaxed), kind) != 0) continue;
    const WaitOwnerLookup lookup = table[i].lookup.load(std::memory_order_acquire);
    return lookup != nullptr ? lookup(object) : WaitOwner{};
  }
  return {};
}

bool read_quietly(const void* address, void* out, std::size_t size) noexcept {
  // Through the kernel: an unmapped page is an error, not a fault, and no
  // sanitizer sees the read.
  iovec local{out, size};
  iovec remote{const_cast<void*>(address), size};
  return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(size);
}

std::uint64_t fiber_id_at(const FiberControl* control) noexcept {
  if (control == nullptr) return 0;
  std::uint64_t id = 0;
  if (!read_member_quietly<FiberControl>(control, &FiberControl::id, id)) return 0;
  return id;
}

}  // namespace weft::detail
