// Big frames for stack_test, built without stack-clash probing
// (tests/stack_frames.cpp).
#pragma once

#include <cstddef>

namespace weft::test {

// A 72 KiB frame that writes its lowest byte first, then its highest.
// Returns how far below `caller` (an address in the caller's frame) its
// lowest byte lay, so that a test can check the frame is as big as its
// name.
std::size_t unprobed_72k_frame(int seed, const void* caller);

}  // namespace weft::test
