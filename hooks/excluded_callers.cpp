#include "excluded_callers.h"

#include <dlfcn.h>
#include <fnmatch.h>
#include <link.h>
#include <pthread.h>
#include <unwind.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "../runtime/fiber_control.h"
#include "../runtime/stack.h"
#include "real_calls.h"

namespace weft::detail {

CallerCache caller_cache;
std::atomic<int> listed_object_loaded{-1};

namespace {

// Whether an object either lock list names is loaded (as
// listed_object_loaded is for the hooks' list).
std::atomic<int> lock_listed_object_loaded{-1};

bool listed_for_calls(const char* path) { return ExcludeList::from_environment().excludes(path); }

// --- the lock callers' verdicts: code ranges --------------------------------
//
// lock_caller_excluded runs on a contended lock's way to a wait, where the
// caller may be an allocator whose own locks are pthread mutexes (jemalloc)
// and which holds another of them: it must not allocate, nor take the
// loader's lock (dladdr). So the code of the objects the lock lists name,
// and of the sanitizer runtimes that interpose on lock calls, is kept as
// address ranges, found when the loaded objects are looked at
// (notice_loaded_objects, at every scheduler's construction, dlopen and
// dlclose), and a caller is a lookup among them. Written under
// looking_at_objects; read under lock_ranges_sequence, odd while written
// (a sequence lock). A fork waits for a look in progress (the atfork
// handlers below): a child forked in the middle of one, its lock held and
// its sequence odd for good, hung in its own scheduler's construction.
enum class RangeKind : std::uint8_t { none, listed, interposer };
constexpr std::size_t kMaxLockRanges = 256;
std::atomic<std::uintptr_t> lock_range_begin[kMaxLockRanges];
std::atomic<std::uintptr_t> lock_range_end[kMaxLockRanges];
std::atomic<RangeKind> lock_range_kind[kMaxLockRanges];
std::atomic<std::size_t> lock_range_count{0};
std::atomic<std::uint32_t> lock_ranges_sequence{0};
SpinLock looking_at_objects;

void before_fork() noexcept { looking_at_objects.lock(); }
void after_fork() noexcept { looking_at_objects.unlock(); }
[[gnu::constructor]] void register_fork_handlers() { pthread_atfork(&before_fork, &after_fork, &after_fork); }

// The kind of code `address` lies in (one byte into its call instruction:
// a return address, less one).
RangeKind lock_range_at(std::uintptr_t address) noexcept {
  for (;;) {
    const std::uint32_t before = lock_ranges_sequence.load(std::memory_order_acquire);
    if ((before & 1) != 0) continue;  // being written: a few stores
    RangeKind kind = RangeKind::none;
    const std::size_t count = lock_range_count.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < count; ++i) {
      if (address >= lock_range_begin[i].load(std::memory_order_relaxed) &&
          address < lock_range_end[i].load(std::memory_order_relaxed)) {
        kind = lock_range_kind[i].load(std::memory_order_relaxed);
        break;
      }
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (lock_ranges_sequence.load(std::memory_order_relaxed) == before) return kind;
  }
}

// Bumped by every forget_callers(), so that a classification made across a
// dlclose is not left in the cache (kind_of).
std::atomic<std::uint64_t> cache_generation{0};

std::string_view file_name(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool matches(const std::string& pattern, const char* text, int flags) {
  return fnmatch(pattern.c_str(), text, flags) == 0;
}

// The sanitizer runtimes a GCC build links to (libasan.so, libtsan.so...)
// and Clang's shared ones: every call of theirs that reaches a hook is an
// interceptor's call, made for its own caller.
bool is_sanitizer_runtime(std::string_view path) {
  const std::string name(file_name(path));
  return matches("lib*san.so*", name.c_str(), 0) || matches("libclang_rt.*", name.c_str(), 0);
}

// A handle of the object libweft's code is in (the executable when it is
// linked statically), for dlsym; null if it cannot be had.
void* own_object() {
  static void* const own = [] {
    Dl_info info{};
    link_map* map = nullptr;
    if (dladdr1(reinterpret_cast<const void*>(&caller_excluded_slow), &info, reinterpret_cast<void**>(&map),
                RTLD_DL_LINKMAP) == 0 ||
        map == nullptr)
      return static_cast<void*>(nullptr);
    // The executable's own name is "" in its link_map; dlopen(nullptr) is it.
    return dlopen(map->l_name[0] == '\0' ? nullptr : map->l_name, RTLD_LAZY | RTLD_NOLOAD);
  }();
  return own;
}

// The link_map of the object `address` lies in, or null.
link_map* object_at(const void* address) {
  Dl_info info{};
  link_map* map = nullptr;
  if (dladdr1(address, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0) return nullptr;
  return map;
}

// A function outside libweft with the name of one of libweft's hooks (or
// an interceptor's name for it, as Clang's static sanitizer runtimes
// export them): a call from it to the hook is made for its own caller.
bool is_interposer_of_a_hook(const Dl_info& info) {
  if (info.dli_sname == nullptr || own_object() == nullptr) return false;
  std::string_view name = info.dli_sname;
  for (const std::string_view prefix : {"___interceptor_", "__interceptor_"}) {
    if (name.starts_with(prefix)) {
      name.remove_prefix(prefix.size());
      break;
    }
  }
  void* ours = dlsym(own_object(), std::string(name).c_str());
  return ours != nullptr && ours != info.dli_saddr &&
         object_at(ours) == object_at(reinterpret_cast<const void*>(&caller_excluded_slow));
}

CallerKind classify(std::uintptr_t address) {
  Dl_info info{};
  // One byte back: inside the call instruction, so that a call ending an
  // object's text is still that object's.
  if (dladdr(reinterpret_cast<const void*>(address - 1), &info) == 0 || info.dli_fname == nullptr)
    return CallerKind::parks;  // no object: generated code
  if (is_sanitizer_runtime(info.dli_fname) || is_interposer_of_a_hook(info)) return CallerKind::interposer;
  return listed_for_calls(info.dli_fname) ? CallerKind::excluded : CallerKind::parks;
}

// The cached verdict for `address`, classifying it on a miss.
CallerKind kind_of(std::uintptr_t address) {
  std::atomic<std::uintptr_t>& slot = caller_cache.slots[caller_slot(address)];
  const std::uintptr_t entry = slot.load(std::memory_order_relaxed);
  if (entry != 0 && (entry >> 2) == address) return static_cast<CallerKind>(entry & 3);
  const std::uint64_t generation = cache_generation.load(std::memory_order_seq_cst);
  const CallerKind kind = classify(address);
  const std::uintptr_t made = caller_entry(address, kind);
  slot.store(made, std::memory_order_seq_cst);
  // A forget_callers() (a dlclose) during the classification: if its
  // clearing came after our store, the slot is already empty; if the
  // generation moved, take ours back, since it may describe an object that
  // is gone. (All seq_cst: our store, our second load, its increment and its
  // clearing are in one order.)
  if (cache_generation.load(std::memory_order_seq_cst) != generation) {
    std::uintptr_t expected = made;
    slot.compare_exchange_strong(expected, 0, std::memory_order_seq_cst);
  }
  return kind;
}

// The return addresses of the calling thread's stack, innermost first.
struct StackWalk {
  static constexpr int kMaxFrames = 32;
  std::uintptr_t addresses[kMaxFrames];
  int count = 0;
};

_Unwind_Reason_Code record_frame(_Unwind_Context* context, void* arg) {
  auto& walk = *static_cast<StackWalk*>(arg);
  walk.addresses[walk.count++] = _Unwind_GetIP(context);
  return walk.count == StackWalk::kMaxFrames ? _URC_END_OF_STACK : _URC_NO_REASON;
}

// The hook was called by an interposer that returns to `address` (a
// sanitizer's interceptor): the callers beyond it, innermost first, found
// by unwinding (a sanitizer's runtime keeps no frame pointers), are asked
// `decides(return address)` in turn until one answers; an interposer
// answers nothing. False if none does. Not cached: the interposer is the
// same for every caller.
template <class Decides>
bool decided_beyond(std::uintptr_t address, Decides&& decides) {
  StackWalk walk;
  _Unwind_Backtrace(&record_frame, &walk);
  int frame = 0;
  while (frame < walk.count && walk.addresses[frame] != address) ++frame;
  for (++frame; frame < walk.count; ++frame) {
    if (const std::optional<bool> verdict = decides(walk.addresses[frame])) return *verdict;
  }
  return false;
}

// The hooks' verdict through interposers (and further interposers).
bool excluded_beyond(std::uintptr_t address) {
  return decided_beyond(address, [](std::uintptr_t caller) -> std::optional<bool> {
    switch (kind_of(caller)) {
      case CallerKind::parks:
        return false;
      case CallerKind::excluded:
        return true;
      case CallerKind::interposer:
        break;
    }
    return std::nullopt;
  });
}

// The range of libweft's code: the executable segments of the object it
// is in.
struct WeftText {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
};

int find_weft_text(dl_phdr_info* info, std::size_t, void* arg) {
  auto& text = *static_cast<WeftText*>(arg);
  const auto ours = reinterpret_cast<std::uintptr_t>(&caller_excluded_slow);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    if (segment.p_type != PT_LOAD || (segment.p_flags & PF_X) == 0) continue;
    const std::uintptr_t begin = info->dlpi_addr + segment.p_vaddr;
    if (ours >= begin && ours < begin + segment.p_memsz) {
      text = {begin, begin + segment.p_memsz};
      return 1;
    }
  }
  return 0;
}

const WeftText& weft_text() {
  static const WeftText text = [] {
    WeftText found;
    dl_iterate_phdr(&find_weft_text, &found);
    return found;
  }();
  return text;
}

// The first return address outside libweft on the frame-pointer chain
// that starts at `frame`, the frame of a function of libweft's whose own
// return address is in libweft too; 0 if there is none to be found. Each
// frame followed is one of libweft's, which keeps frame pointers (see
// meson.build), and must lie in the fiber's stack, above the one before:
// a libweft linked into an executable built without frame pointers makes
// the chain end early, not read wild memory.
std::uintptr_t caller_outside_weft([[maybe_unused]] const void* frame) {
#if defined(__x86_64__) || defined(__aarch64__)
  // Both keep {previous frame, return address} at the frame address.
  const FiberControl* fiber = current_fiber();
  if (fiber == nullptr) return 0;
  const auto low = reinterpret_cast<std::uintptr_t>(fiber->stack.bottom());
  const auto high = reinterpret_cast<std::uintptr_t>(fiber->stack.top());
  auto at = reinterpret_cast<std::uintptr_t>(frame);
  for (int depth = 0; depth < 16; ++depth) {
    if (at < low || at > high - 2 * sizeof(void*) || at % alignof(void*) != 0) return 0;
    const auto* record = reinterpret_cast<const std::uintptr_t*>(at);
    const std::uintptr_t next = record[0];
    if (next <= at || next < low || next > high - 2 * sizeof(void*) || next % alignof(void*) != 0) return 0;
    const std::uintptr_t return_address = reinterpret_cast<const std::uintptr_t*>(next)[1];
    if (!in_weft_code(reinterpret_cast<const void*>(return_address))) return return_address;
    at = next;
  }
#endif
  return 0;
}

// What the loaded objects are to the lists: whether either names one, and
// the code ranges of the lock callers' verdicts.
struct ListedObjects {
  bool for_calls = false;
  bool for_locks = false;
  std::size_t ranges = 0;  // past kMaxLockRanges, an object's locks park as before
  std::uintptr_t begin[kMaxLockRanges];
  std::uintptr_t end[kMaxLockRanges];
  RangeKind kind[kMaxLockRanges];
};

int find_listed_object(dl_phdr_info* info, std::size_t, void* arg) {
  // The executable's name is "" here; dladdr(3) names it by argv[0].
  const char* name = info->dlpi_name[0] != '\0' ? info->dlpi_name : program_invocation_name;
  if (name == nullptr) return 0;
  auto& found = *static_cast<ListedObjects*>(arg);
  const bool for_calls = listed_for_calls(name);
  const bool for_locks = for_calls || ExcludeList::locks_from_environment().excludes(name);
  found.for_calls = found.for_calls || for_calls;
  found.for_locks = found.for_locks || for_locks;
  const RangeKind kind = for_locks                    ? RangeKind::listed
                         : is_sanitizer_runtime(name) ? RangeKind::interposer
                                                      : RangeKind::none;
  if (kind == RangeKind::none) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    if (segment.p_type != PT_LOAD || (segment.p_flags & PF_X) == 0) continue;
    if (found.ranges == kMaxLockRanges) break;
    found.begin[found.ranges] = info->dlpi_addr + segment.p_vaddr;
    found.end[found.ranges] = info->dlpi_addr + segment.p_vaddr + segment.p_memsz;
    found.kind[found.ranges] = kind;
    ++found.ranges;
  }
  return 0;
}

void publish_lock_ranges(const ListedObjects& found) noexcept {
  // With looking_at_objects held.
  lock_ranges_sequence.fetch_add(1, std::memory_order_relaxed);  // odd: readers wait
  std::atomic_thread_fence(std::memory_order_release);
  for (std::size_t i = 0; i < found.ranges; ++i) {
    lock_range_begin[i].store(found.begin[i], std::memory_order_relaxed);
    lock_range_end[i].store(found.end[i], std::memory_order_relaxed);
    lock_range_kind[i].store(found.kind[i], std::memory_order_relaxed);
  }
  lock_range_count.store(found.ranges, std::memory_order_relaxed);
  lock_ranges_sequence.fetch_add(1, std::memory_order_release);
}

// The lock callers' verdict through interposers: as excluded_beyond, by
// code range.
bool lock_excluded_beyond(std::uintptr_t address) {
  return decided_beyond(address, [](std::uintptr_t caller) -> std::optional<bool> {
    switch (lock_range_at(caller - 1)) {
      case RangeKind::none:
        return false;
      case RangeKind::listed:
        return true;
      case RangeKind::interposer:
        break;
    }
    return std::nullopt;
  });
}

}  // namespace

ExcludeList ExcludeList::parse(std::string_view text, std::string_view defaults_text) {
  ExcludeList list;
  bool defaults_added = false;
  while (!text.empty()) {
    const std::size_t end = text.find_first_of(":,");
    const std::string_view item = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    if (item.empty()) continue;
    if (item == "default") {
      if (!defaults_added) {
        defaults_added = true;
        const ExcludeList defaults = parse(defaults_text, {});
        list.patterns_.insert(list.patterns_.end(), defaults.patterns_.begin(), defaults.patterns_.end());
      }
      continue;
    }
    list.patterns_.emplace_back(item);
  }
  return list;
}

const ExcludeList& ExcludeList::from_environment() {
  static const ExcludeList list = [] {
    const char* value = std::getenv("WEFT_HOOKS_EXCLUDE");
    return parse(value == nullptr ? kDefaultExclusions : std::string_view(value));
  }();
  return list;
}

const ExcludeList& ExcludeList::locks_from_environment() {
  static const ExcludeList list = [] {
    const char* value = std::getenv("WEFT_HOOK_LOCKS_EXCLUDE");
    return value == nullptr ? parse(kDefaultLockExclusions, {}) : parse(value, kDefaultLockExclusions);
  }();
  return list;
}

bool ExcludeList::excludes(const char* path) const {
  const char* const slash = std::strrchr(path, '/');
  const char* const name = slash == nullptr ? path : slash + 1;
  for (const std::string& pattern : patterns_) {
    const bool whole_path = pattern.find('/') != std::string::npos;
    if (whole_path ? matches(pattern, path, FNM_PATHNAME) : matches(pattern, name, 0)) return true;
  }
  return false;
}

bool in_weft_code(const void* address) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  const WeftText& text = weft_text();
  return a >= text.begin && a < text.end;
}

void notice_loaded_objects() noexcept {
  static ListedObjects found;  // 6 KiB: not on a fiber's stack; guarded by looking_at_objects
  std::lock_guard guard(looking_at_objects);
  found.for_calls = false;
  found.for_locks = false;
  found.ranges = 0;
  try {
    dl_iterate_phdr(&find_listed_object, &found);
  } catch (...) {
    // std::bad_alloc reading a list: the calls are looked at one by one,
    // and the locks' ranges are whatever was found.
    found.for_calls = true;
  }
  publish_lock_ranges(found);
  listed_object_loaded.store(found.for_calls ? 1 : 0, std::memory_order_relaxed);
  lock_listed_object_loaded.store(found.for_locks ? 1 : 0, std::memory_order_relaxed);
}

bool caller_excluded_slow(const void* return_address, const void* frame) noexcept {
  if (listed_object_loaded.load(std::memory_order_relaxed) < 0) {
    notice_loaded_objects();
    if (listed_object_loaded.load(std::memory_order_relaxed) == 0) return false;
  }
  auto address = reinterpret_cast<std::uintptr_t>(return_address);
  if (in_weft_code(return_address)) {
    address = caller_outside_weft(frame);
    if (address == 0) return false;
  }
  try {
    switch (kind_of(address)) {
      case CallerKind::parks:
        return false;
      case CallerKind::excluded:
        return true;
      case CallerKind::interposer:
        return excluded_beyond(address);
    }
  } catch (...) {
    // std::bad_alloc reading the list: the call parks, as it would have
    // without any list.
  }
  return false;
}

bool lock_caller_excluded(const void* return_address) noexcept {
  // Looked at before any fiber ran (every scheduler's construction calls
  // notice_loaded_objects): unset here is a process with no scheduler.
  if (lock_listed_object_loaded.load(std::memory_order_relaxed) <= 0) return false;
  const auto address = reinterpret_cast<std::uintptr_t>(return_address);
  switch (lock_range_at(address - 1)) {
    case RangeKind::none:
      return false;
    case RangeKind::listed:
      return true;
    case RangeKind::interposer:
      return lock_excluded_beyond(address);
  }
  return false;
}

void forget_callers() noexcept {
  cache_generation.fetch_add(1, std::memory_order_seq_cst);
  for (std::atomic<std::uintptr_t>& slot : caller_cache.slots) slot.store(0, std::memory_order_seq_cst);
  notice_loaded_objects();
}

}  // namespace weft::detail

using namespace weft::detail;

extern "C" {
// libc's names, interposed: exported, unlike the rest of libweft
// (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)

// The object, or one it needs, may be listed. Looked at before the call
// returns, so before the caller can hand out a pointer into the object:
// whoever calls into it has seen listed_object_loaded set. (Calls that
// the object's constructors make, inside the real dlopen, come too early
// to be excluded.) RTLD_NOLOAD and the executable's handle load nothing.
void* dlopen(const char* file, int mode) {
  static std::atomic<void*> real_dlopen{nullptr};
  void* handle = real::load<void*(const char*, int)>(real_dlopen, "dlopen")(file, mode);
  if (handle != nullptr && file != nullptr && (mode & RTLD_NOLOAD) == 0) notice_loaded_objects();
  return handle;
}

// Another object may be mapped where this one was, with the same return
// addresses: its calls are classified afresh. (A dlopen of a new object in
// the moment between the real dlclose and the clearing, on another thread,
// could still meet a verdict of the old one; both would have to call from
// the very same address.)
int dlclose(void* handle) {
  static std::atomic<void*> real_dlclose{nullptr};
  const int result = real::load<int(void*)>(real_dlclose, "dlclose")(handle);
  forget_callers();
  return result;
}

#pragma GCC visibility pop
}  // extern "C"
