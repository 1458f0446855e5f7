#include "stack.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "context.h"
#include "system_calls.h"

namespace weft::detail {
namespace {

// Linux 6.13+ installs guard regions inside an existing mapping, so a guard
// costs no extra VMA (each mprotect'ed guard splits the mapping in two and
// counts against vm.max_map_count). Older kernels answer EINVAL.
constexpr int kMadvGuardInstall = 102;

enum class GuardMethod { unknown, madvise, mprotect };
std::atomic<GuardMethod> guard_method{GuardMethod::unknown};

std::size_t page_size() noexcept {
  static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

std::string read_max_map_count() {
  std::ifstream in("/proc/sys/vm/max_map_count");
  std::string value;
  return (in >> value) ? value : std::string("unknown");
}

// The stacks a pool keeps where each guard is a mapping of its own
// (mprotect: two mappings a stack): an eighth of vm.max_map_count, so that
// kept stacks take at most a quarter of the mappings, and a process whose
// burst of fibers has ended can still map its threads' stacks and its
// allocator's arenas (a probe on an emulated Linux 6.1: 34,000 fibers'
// stacks kept, and std::thread failed for good after they ended). Read
// with the system call itself, at the pool's construction: libstdc++'s
// streams would go through the hooks.
std::size_t stacks_kept_with_mapped_guards() noexcept {
  std::size_t max_map_count = 65'530;  // the kernel's default
  char text[32];
  const ssize_t n = sys::read_small_file("/proc/sys/vm/max_map_count", text, sizeof text - 1);
  if (n > 0) {
    std::size_t value = 0;
    const auto [end, error] = std::from_chars(text, text + n, value);
    if (error == std::errc() && end != text) max_map_count = value;
  }
  return max_map_count / 8;
}

[[noreturn]] void throw_stack_error(const char* what, std::size_t size, int error) {
  std::string message = "weft: cannot ";
  message += what;
  message += " a fiber stack of " + std::to_string(size / 1024) + " KiB: ";
  message += std::strerror(error);
  if (error == ENOMEM) {
    message += " (out of memory, or out of mappings: vm.max_map_count is " + read_max_map_count() +
               "; raise it, or use smaller or fewer stacks)";
  }
  throw StackError(message);
}

void install_guard(char* base, std::size_t mapping_size) {
  const std::size_t guard = Stack::guard_size();
  if (guard_method.load(std::memory_order_relaxed) != GuardMethod::mprotect) {
    if (::madvise(base, guard, kMadvGuardInstall) == 0) {
      guard_method.store(GuardMethod::madvise, std::memory_order_relaxed);
      return;
    }
    if (errno != EINVAL) {
      const int error = errno;
      ::munmap(base, mapping_size);
      throw_stack_error("guard", mapping_size - guard, error);
    }
    guard_method.store(GuardMethod::mprotect, std::memory_order_relaxed);
  }
  if (::mprotect(base, guard, PROT_NONE) != 0) {
    const int error = errno;
    ::munmap(base, mapping_size);
    throw_stack_error("guard", mapping_size - guard, error);
  }
}

}  // namespace

// The guard region: 64 KiB of address space, not one page. Code built with
// -fstack-clash-protection (libweft, and users through weft.pc) probes
// every page a frame spans, so its overflow hits the guard whatever the
// frame's size; code built without it touches a big frame wherever it
// likes, so the guard must be wider than the frames it is to catch. The
// region costs address space only (never backed; with MADV_GUARD_INSTALL
// not even a mapping), plus its share of the page tables (docs/benchmarks.md).
std::size_t Stack::guard_size() noexcept {
  static const std::size_t size = (kGuardBytes + page_size() - 1) / page_size() * page_size();
  return size;
}

void check_stack_size(std::size_t size, const char* what) {
  if (size >= kMinStackSize && size <= kMaxStackSize) return;
  throw std::invalid_argument(std::string(what) + " must be at least 16 KiB and at most 1 TiB, got " +
                              std::to_string(size) + " bytes");
}

Stack Stack::allocate(std::size_t usable_size) {
  check_stack_size(usable_size, "weft: a fiber stack's size");
  const std::size_t page = page_size();
  const std::size_t usable = (usable_size + page - 1) / page * page;
  const std::size_t mapping_size = usable + guard_size();
  void* memory = ::mmap(nullptr, mapping_size, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (memory == MAP_FAILED) throw_stack_error("map", usable, errno);
  install_guard(static_cast<char*>(memory), mapping_size);
  Stack stack;
  stack.base_ = static_cast<char*>(memory);
  stack.mapping_size_ = mapping_size;
  return stack;
}

void Stack::unmap() noexcept {
  forget_stack_memory(base_, mapping_size_);
  ::munmap(base_, mapping_size_);
  delete_sanitizer_fiber(sanitizer_fiber_);
  delete_sanitizer_fiber(park_sanitizer_fiber_);
  base_ = nullptr;
  sanitizer_fiber_ = nullptr;
  park_sanitizer_fiber_ = nullptr;
}

void* Stack::sanitizer_fiber() {
  if (sanitizer_fiber_ == nullptr) sanitizer_fiber_ = new_sanitizer_fiber();
  return sanitizer_fiber_;
}

void* Stack::park_sanitizer_fiber() {
  if (park_sanitizer_fiber_ == nullptr) park_sanitizer_fiber_ = new_sanitizer_fiber();
  return park_sanitizer_fiber_;
}

StackPool::StackPool(std::size_t stack_size, std::size_t capacity, unsigned worker_caches)
    : stack_size_((stack_size + page_size() - 1) / page_size() * page_size()),
      capacity_(capacity),
      kept_with_mapped_guards_(std::min(capacity, stacks_kept_with_mapped_guards())),
      worker_caches_(std::make_unique<WorkerCache[]>(worker_caches)),
      worker_cache_count_(worker_caches) {}

// A worker's cache trades with the shared pool kWorkerCacheSize / 2 stacks
// at a time (Go's gfget/gfput): a worker that spawns while another one
// finishes the fibers takes one lock per 32 stacks, not one per stack.
Stack StackPool::acquire(std::size_t size, unsigned cache) {
  if (size == 0 || size == stack_size_) {
    if (cache < worker_cache_count_) {
      std::vector<Stack>& local = worker_caches_[cache].stacks;
      if (local.empty()) {
        if (local.capacity() == 0) local.reserve(kWorkerCacheSize);
        std::lock_guard guard(lock_);
        for (std::size_t i = 0; i < kWorkerCacheSize / 2 && !shared_.empty(); ++i) {
          local.push_back(std::move(shared_.back()));
          shared_.pop_back();
        }
      }
      if (!local.empty()) {
        Stack stack = std::move(local.back());
        local.pop_back();
        return stack;
      }
    } else {
      std::lock_guard guard(lock_);
      if (!shared_.empty()) {
        Stack stack = std::move(shared_.back());
        shared_.pop_back();
        return stack;
      }
    }
  }
  return Stack::allocate(size == 0 ? stack_size_ : size);
}

std::size_t StackPool::kept_at_most() const noexcept {
  return guard_method.load(std::memory_order_relaxed) == GuardMethod::mprotect ? kept_with_mapped_guards_ : capacity_;
}

void StackPool::release(Stack stack, unsigned cache) noexcept {
  if (!stack || stack.usable_size() != stack_size_) return;  // unmapped here
  const std::size_t kept = kept_at_most();
  if (cache < worker_cache_count_) {
    std::vector<Stack>& local = worker_caches_[cache].stacks;
    if (local.capacity() == 0) local.reserve(kWorkerCacheSize);
    if (local.size() == kWorkerCacheSize) {
      // Full: the older half goes to the shared pool (unmapped past its
      // capacity), in one locked section.
      std::lock_guard guard(lock_);
      if (shared_.capacity() == 0) shared_.reserve(capacity_ < 4096 ? capacity_ : 4096);
      for (std::size_t i = 0; i < kWorkerCacheSize / 2; ++i) {
        if (shared_.size() < kept) shared_.push_back(std::move(local[i]));
      }
      local.erase(local.begin(), local.begin() + kWorkerCacheSize / 2);
    }
    local.push_back(std::move(stack));
    return;
  }
  std::lock_guard guard(lock_);
  if (shared_.size() < kept) {
    if (shared_.capacity() == 0) shared_.reserve(capacity_ < 4096 ? capacity_ : 4096);
    shared_.push_back(std::move(stack));
  }
}

}  // namespace weft::detail
