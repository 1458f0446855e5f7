// For stack_test: big frames built WITHOUT -fstack-clash-protection
// (tests/meson.build), as a user's code compiled without weft.pc's flags
// would be. Such a frame is not probed page by page: its first access can
// land anywhere below the stack, and only the guard region's size decides
// whether it faults there or writes into a neighbour.
#include "stack_frames.h"

namespace weft::test {

// The buffer escapes into an empty asm that may read all of it, so the
// whole array is a real object in the frame. A volatile array touched at
// two constant indices is not enough: Clang 14 split it into the two bytes
// touched, a frame of 16 bytes that never came near the guard (issue 12).
[[gnu::noinline]] std::size_t unprobed_72k_frame(int seed, const void* caller) {
  char buffer[72 * 1024];
  asm volatile("" : : "r"(buffer) : "memory");
  volatile char* bytes = buffer;
  bytes[0] = static_cast<char>(seed);  // the lowest byte first: the access that jumps a small guard
  bytes[sizeof(buffer) - 1] = static_cast<char>(seed + 1);
  asm volatile("" : : "r"(buffer) : "memory");
  return static_cast<std::size_t>(static_cast<const char*>(caller) - buffer);
}

}  // namespace weft::test
