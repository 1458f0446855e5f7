// detail::returned_from_user_code(): written after each call that weft's
// headers make into a user's callable for libweft to run (a fiber's body,
// a pool's task).
#pragma once

#include "require_cxx20.h"

namespace weft::detail {

// The user's function returns here, into a frame compiled in the user's
// program, instead of jumping from its last statement into the function it
// ends with (a sibling call: `[&] { m.lock(); }`). Jumped into, a hooked
// lock call would see a return address inside libweft (the runtime's
// caller of this frame), take the call for libweft's own
// (hooks/locks.h, called_from_weft) and block the worker's thread
// instead of parking the fiber. The empty statement has to run after the
// call, which is all it is for.
inline void returned_from_user_code() noexcept { asm volatile("" ::: "memory"); }

}  // namespace weft::detail
