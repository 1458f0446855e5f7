// Callers whose hooked calls pass straight through (WEFT_HOOKS_EXCLUDE).
//
// Some libraries are not fiber-safe: they keep thread_local state across a
// blocking call, or hand work between their own threads with raw futexes
// (docs/io.md, "Libraries that are not fiber-safe, and why"). gRPC is one:
// its synchronous client blocks in epoll_wait with ExecCtx::exec_ctx_ and
// its poller's thread_locals pointing into the caller's frame, while the
// calls that will wake it wait in absl::CondVar (a futex, which no hook
// sees). Parked, another fiber on the same thread overwrites that state or
// blocks the thread under the parked poller.
//
// So a hooked call whose caller lies in a listed shared object is libc's
// call, in a fiber too: no park, no checkpoint, the fiber keeps its thread
// for the whole call, as a thread would, and sysmon hands the worker's
// other fibers to a spare while the thread sleeps in the kernel
// (docs/sysmon.md). The list is WEFT_HOOKS_EXCLUDE: fnmatch(3) patterns,
// separated by ':' or ',', each matched against the object's file name (a
// pattern with a '/' against its whole path); the word `default` stands
// for kDefaultExclusions. Unset, it is kDefaultExclusions; empty, nothing
// is excluded. Read once, at the first hooked call from a fiber that
// needs it.
//
// "The caller" is the return address of the hooked call, classified once
// with dladdr(3) and kept in a process-wide cache per return address: on
// the hot path, a multiply, one relaxed load and a compare. Two kinds of
// code in front of the user's are looked through:
// - weft's own: a hook whose gate is in a helper (connect's, accept's, a
//   checkpoint's) asks with the helper's return address, inside libweft;
//   the frame-pointer chain (libweft keeps frame pointers) is followed out
//   of libweft to the hook's caller. A few loads, no cache.
// - an interposer of the same call: a sanitizer's interceptor (ASan and
//   TSan come before libweft in the search order). The caller is found by
//   unwinding, since their runtimes keep no frame pointers: slow, but only
//   under a sanitizer.
// A call made through another shared object (a library's own wrapper
// library) is that object's call: list it too (libgpr, gRPC's platform
// layer, is in the default list for that reason).
//
// Until a listed object is loaded, none of this runs: the check is one
// load of listed_object_loaded. The cache is invalidated by dlclose
// (hooked for that): another object may be loaded where the closed one
// was, at the same addresses.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weft::detail {

// What WEFT_HOOKS_EXCLUDE means when unset, and what `default` stands for
// in it: gRPC's core and C++ libraries (libgrpc.so, libgrpc++.so,
// libgrpc_unsecure.so, libgrpcpp_channelz.so...), libgpr.so, its platform
// layer (it sleeps through it), and libaddress_sorting.so, which connects
// UDP sockets for gRPC while a call resolves its target.
inline constexpr std::string_view kDefaultExclusions =
    "libgrpc*:libgpr.so*:libaddress_sorting.so*:libabsl_*:libcares.so*";

// What WEFT_HOOK_LOCKS_EXCLUDE means when unset, and what `default` stands
// for in it: the objects whose contended pthread locks (mutex, rwlock,
// condition variable) are waited for as a thread waits, blocking the
// fiber's thread, while their other calls park. OpenSSL's libcrypto: its
// per-thread random generators are used without a lock, and one that
// reseeds takes its parent's rwlock midway; parked there, another fiber
// of the same thread used the half-reseeded generator, and RAND_bytes and
// TLS handshakes failed ("reseed error").
inline constexpr std::string_view kDefaultLockExclusions = "libcrypto.so*";

// The parsed list of patterns.
class ExcludeList {
 public:
  // Splits `text` at ':' and ','; empty items are skipped, `default` is
  // expanded to `defaults` (once, however often it is named).
  static ExcludeList parse(std::string_view text, std::string_view defaults = kDefaultExclusions);

  // WEFT_HOOKS_EXCLUDE's list (kDefaultExclusions when unset), parsed once.
  static const ExcludeList& from_environment();
  // WEFT_HOOK_LOCKS_EXCLUDE's list (kDefaultLockExclusions when unset),
  // parsed once. Its objects' locks wait as a thread's; so do those of
  // WEFT_HOOKS_EXCLUDE's objects, all of whose calls do.
  static const ExcludeList& locks_from_environment();

  // True if a pattern matches `object_path` (the file of a loaded object,
  // as dladdr(3) names it): its last component, or all of it for a
  // pattern that has a '/'.
  bool excludes(const char* object_path) const;

  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  std::vector<std::string> patterns_;
};

// Whether any loaded object is listed: -1 until the loaded objects are
// first looked at (at the first call from a fiber), then 0 or 1, looked at
// again after every dlopen and dlclose (hooked for that). While it
// is 0, which is every process without gRPC or Abseil and no list of its
// own, the check is this one load.
extern std::atomic<int> listed_object_loaded;

// The cache of verdicts, one word per slot: the return address shifted
// left by two, or'ed with a CallerKind; 0 is an empty slot. Return
// addresses are below 2^62 on every 64-bit Linux, so the shift loses
// nothing. Slots are written whole (relaxed: a reader sees some slot's
// whole word, and compares the address in it).
enum class CallerKind : std::uintptr_t { parks = 1, excluded = 2, interposer = 3 };

inline constexpr unsigned kCallerCacheBits = 9;

struct CallerCache {
  alignas(64) std::atomic<std::uintptr_t> slots[1u << kCallerCacheBits];
};
extern CallerCache caller_cache;

inline std::size_t caller_slot(std::uintptr_t address) noexcept {
  return static_cast<std::size_t>((static_cast<std::uint64_t>(address) * 0x9E3779B97F4A7C15ull) >>
                                  (64 - kCallerCacheBits));
}

inline std::uintptr_t caller_entry(std::uintptr_t address, CallerKind kind) noexcept {
  return (address << 2) | static_cast<std::uintptr_t>(kind);
}

// True if `address` lies in libweft's own code.
bool in_weft_code(const void* address) noexcept;

// The slow half of caller_excluded: a miss, weft's own code, an interposer.
bool caller_excluded_slow(const void* return_address, const void* frame) noexcept;

// True if the hooked call that returns to `return_address` must pass
// straight through; `frame` is the frame address of the function it
// returns from (__builtin_frame_address(0) there). May call dladdr on a
// miss: not async-signal-safe, so it comes after every check that rules a
// park out cheaply. In a fiber only (the frame walk keeps to its stack).
inline bool caller_excluded(const void* return_address, const void* frame) noexcept {
  if (listed_object_loaded.load(std::memory_order_relaxed) == 0) [[likely]]
    return false;
  const auto address = reinterpret_cast<std::uintptr_t>(return_address);
  const std::uintptr_t entry = caller_cache.slots[caller_slot(address)].load(std::memory_order_relaxed);
  if (entry == caller_entry(address, CallerKind::parks)) [[likely]]
    return false;
  if (entry == caller_entry(address, CallerKind::excluded)) return true;
  return caller_excluded_slow(return_address, frame);
}

// True if a lock call (hooks/locks.cpp, how_call_waits) that returns to
// `return_address` must wait as a thread's: its caller lies in an object
// either list names (ExcludeList::locks_from_environment). Asked on a
// contended lock's way to a wait and at a lock's checkpoint, never by an
// uncontended lock: a lookup among the listed objects' code ranges, kept
// by notice_loaded_objects, which allocates nothing and takes no lock (the
// caller may be an allocator holding a lock of its own). Not for
// libweft's own calls, which never get here.
bool lock_caller_excluded(const void* return_address) noexcept;

// Looks at the loaded objects again: at every scheduler's construction
// (compose/scheduler.cpp; before any fiber, so that lock_caller_excluded
// never has to), and after a dlopen.
void notice_loaded_objects() noexcept;

// Empties the cache and looks at the loaded objects again (after a
// dlclose).
void forget_callers() noexcept;

}  // namespace weft::detail
