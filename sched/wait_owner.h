// Who holds what a parked fiber waits on: the edges of weft-dump's
// "(held by fiber #N ...)" and of its deadlock detector (docs/dump.md).
//
// A primitive that has an owner (weft::Mutex: the fiber or thread that
// holds it; Fiber::join: the fiber joined) registers a lookup for its
// WaitSite kind; the snapshot calls it for each fiber parked on that kind.
// The layers above register without introspect/ knowing them (the libc
// lock hooks register "std::mutex" the same way).
//
// A lookup runs on the dump's thread, at any moment: the object may be
// changing, or already gone if its waiter woke meanwhile, and since a
// fiber's wait kind and object are read apart, `object` may even be
// another wait's (an fd's number, say). So it treats `object` as a bare
// address: it reads only through read_quietly() or read_member_quietly(),
// which cannot fault and which the sanitizers do not see, never through a
// pointer to the type; what it returns is a hint for a reader, never
// something to act on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../runtime/member_offset.h"

namespace weft::detail {

struct FiberControl;

struct WaitOwner {
  std::uint64_t fiber = 0;  // the owning fiber's id; 0: none or unknown
  int thread = 0;           // the owning plain thread's tid; 0: none or unknown
  // A shared lock that readers hold, who are not recorded (as glibc keeps
  // no list of them): how many; 0 otherwise.
  std::uint32_t readers = 0;
};

using WaitOwnerLookup = WaitOwner (*)(const void* object) noexcept;

// Registers `lookup` for waits whose WaitSite::kind equals `kind` (by
// content; `kind` must live forever, as WaitSite kinds do). A second
// registration of a kind replaces the first. At most kMaxWaitOwnerKinds
// kinds; false beyond them. Any thread, also during static initialization.
constexpr std::size_t kMaxWaitOwnerKinds = 16;
bool register_wait_owner(const char* kind, WaitOwnerLookup lookup) noexcept;

// Who holds `object` of a wait of `kind`: {0, 0} when nobody does, when no
// lookup is registered for `kind`, when `object` is null, or when it cannot
// be told.
WaitOwner find_wait_owner(const char* kind, const void* object) noexcept;

// Copies `size` bytes at `address` of this process into `out`; false if
// any of them is not mapped readable. Never faults.
bool read_quietly(const void* address, void* out, std::size_t size) noexcept;

// Reads `member` of the T at address `object` into `out`, quietly (false
// if it cannot be read), in integer arithmetic: `object` may be null or
// misaligned, where even naming a member through a T* is undefined.
// T need not be standard-layout (runtime/member_offset.h). T is named,
// not deduced: a member T inherits would otherwise give its base's offset.
template <class T, class M, class Out>
bool read_member_quietly(const void* object, M std::type_identity_t<T>::*member, Out& out) noexcept {
  static_assert(sizeof(M) == sizeof(Out) && std::is_trivially_copyable_v<Out>, "reads the member's bytes whole");
  return read_quietly(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(object) + member_offset(member)),
                      &out, sizeof(out));
}

// The id of the fiber whose control block is at `control`, read quietly;
// 0 if it cannot be read.
std::uint64_t fiber_id_at(const FiberControl* control) noexcept;

}  // namespace weft::detail
