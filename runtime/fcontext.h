// The machine-level switch under ExecutionContext (runtime/context.h): save
// the callee-saved registers on the current stack, load another stack,
// restore its registers, go on there. Boost.Context's fcontext interface.
//
// On x86-64 it is weft's own (fcontext_x86_64.cpp), because Boost's
// jump_fcontext leaves by an indirect `jmp`. The `call` into it pushes a
// return address that no `ret` pops, so after every switch the CPU's return
// stack predicts each return one frame too deep: every `ret` on the way back
// up from a park or a yield is mispredicted (about 5 ns each here). Ours
// leaves a resumed context by `ret`: the target was saved by the same call
// site, so the predicted return address is the right one and the return
// stack stays aligned. Measured here: a PingPong round trip 135 -> 90 ns,
// a yield 26 -> 20 ns (docs/benchmarks.md).
//
// A context that has never run has no matching return address, so it is
// entered by an indirect jump, which the branch target buffer predicts; so
// is the last switch of a finished context, whose call never returns.
//
// Elsewhere (aarch64 leaves by `ret` already) it is Boost.Context's.
#pragma once

#include <boost/context/detail/fcontext.hpp>
#include <cstddef>

namespace weft::detail {

using boost::context::detail::fcontext_t;
using boost::context::detail::transfer_t;

// How jump_fcontext leaves for its target.
enum class JumpKind : int {
  resume = 0,  // the target was saved by jump_fcontext: return into it
  enter = 1,   // a fresh target, or a caller that never comes back
};

#if defined(__x86_64__) && defined(__ELF__)
#define WEFT_OWN_FCONTEXT 1

extern "C" transfer_t weft_jump_fcontext(fcontext_t to, void* data, JumpKind kind);

// A context that, once jumped to, calls `entry` with the transfer on the
// stack that ends at `stack_top` (`size` bytes long; unused here).
fcontext_t make_fcontext(void* stack_top, std::size_t size, void (*entry)(transfer_t)) noexcept;

// Saves the caller, resumes `to`, passing it `data`; returns when switched
// back to, with the context that did so and its data.
inline transfer_t jump_fcontext(fcontext_t to, void* data, JumpKind kind) noexcept {
  return weft_jump_fcontext(to, data, kind);
}

#else

inline fcontext_t make_fcontext(void* stack_top, std::size_t size, void (*entry)(transfer_t)) noexcept {
  return boost::context::detail::make_fcontext(stack_top, size, entry);
}
inline transfer_t jump_fcontext(fcontext_t to, void* data, JumpKind) noexcept {
  return boost::context::detail::jump_fcontext(to, data);
}

#endif

}  // namespace weft::detail
