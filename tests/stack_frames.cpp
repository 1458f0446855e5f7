// For stack_test: big frames built WITHOUT -fstack-clash-protection
// (tests/meson.build), as a user's code compiled without weft.pc's flags
// would be. Such a frame is not probed page by page: its first access can
// land anywhere below the stack, and only the guard region's size decides
// whether it faults there or writes into a neighbour.
#include <cstddef>

namespace weft::test {

// A 72 KiB frame; writes its lowest byte first, then its highest.
[[gnu::noinline]] int unprobed_72k_frame(int seed) {
  volatile char buffer[72 * 1024];
  buffer[0] = static_cast<char>(seed);
  buffer[sizeof(buffer) - 1] = static_cast<char>(seed + 1);
  return buffer[0] + buffer[sizeof(buffer) - 1];
}

}  // namespace weft::test
