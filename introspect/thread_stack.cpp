#include "thread_stack.h"

#include <dlfcn.h>

#include <algorithm>

#include "../sched/wait_owner.h"
#include "fiber_stack_walk.h"

namespace weft::detail {
namespace {

constexpr std::size_t kWord = sizeof(std::uintptr_t);
// How far above the stack pointer the first frame record is looked for:
// libc's wrappers and their cancellation steps keep little.
constexpr std::size_t kScanBytes = 2048;

bool read_words(std::uintptr_t at, std::uintptr_t* out, std::size_t words, std::uintptr_t low, std::uintptr_t high) {
  if (at < low || at + words * kWord > high || at % kWord != 0) return false;
  return read_quietly(reinterpret_cast<const void*>(at), out, words * kWord);
}

// Whether a frame record at `frame` chains: its saved frame pointer lies
// further up the stack and its return address is code, for two records.
bool chains(std::uintptr_t frame, std::uintptr_t low, std::uintptr_t high) {
  for (int link = 0; link < 2; ++link) {
    std::uintptr_t record[2];
    if (!read_words(frame, record, 2, low, high) || !is_code_address(record[1])) return false;
    if (record[0] <= frame || record[0] >= high) return link > 0;  // the outermost frame may end the chain
    frame = record[0];
  }
  return true;
}

}  // namespace

bool is_code_address(std::uintptr_t address) {
  Dl_info info{};
  return address > 1 && ::dladdr(reinterpret_cast<const void*>(address - 1), &info) != 0 && info.dli_fname != nullptr;
}

std::vector<std::uintptr_t> walk_blocked_stack(std::uintptr_t sp, std::uintptr_t pc, std::uintptr_t low,
                                               std::uintptr_t high) {
  std::vector<std::uintptr_t> stack;
  if (pc != 0) stack.push_back(pc);  // after the syscall instruction: the symbolizer looks one byte back, into it
  if (sp < low || sp >= high) return stack;
  std::uintptr_t window[kScanBytes / kWord];
  const std::size_t words = std::min<std::size_t>(kScanBytes, high - sp) / kWord;
  if (!read_words(sp, window, words, low, high)) return stack;
  // The first frame record that chains; return addresses below it first.
  std::uintptr_t frame = 0;
  for (std::size_t i = 0; i + 1 < words && frame == 0; ++i) {
    const std::uintptr_t at = sp + i * kWord;
    if (window[i] > at && window[i] < high && chains(at, low, high))
      frame = at;
    else if (is_code_address(window[i]) && stack.size() < 2)  // the wrapper's return into its caller
      stack.push_back(window[i]);
  }
  while (frame != 0 && stack.size() < kMaxStackFrames) {
    std::uintptr_t record[2];
    if (!read_words(frame, record, 2, low, high) || !is_code_address(record[1])) break;
    stack.push_back(record[1]);
    if (record[0] <= frame) break;
    frame = record[0];
  }
  return stack;
}

}  // namespace weft::detail
