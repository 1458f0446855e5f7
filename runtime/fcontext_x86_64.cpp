// weft's x86-64 (System V) context switch; why it exists: fcontext.h.
//
// A saved context is its stack pointer, which points at this frame:
//
//   0x00  MXCSR (4 bytes), x87 control word (2 bytes)
//   0x08  r12   0x10  r13   0x18  r14   0x20  r15   0x28  rbx   0x30  rbp
//   0x38  where to go on: the return address of the call that saved it,
//         or weft_context_start for a context that has not run yet
//
// Boost.Context 1.74 uses the same frame; newer versions differ, which is
// why make_fcontext is ours too.
#include "fcontext.h"

#ifdef WEFT_OWN_FCONTEXT

#include <cstdint>
#include <cstring>

// weft_jump_fcontext(to = rdi, data = rsi, kind = edx) returns
// transfer_t{rax = the context it saved, rdx = data}; a fresh context gets
// the same pair as its entry's argument, in rdi and rsi.
//
// weft_context_start: a fresh context's first stop. The restore left the
// entry in rbx and a 16-byte aligned rsp: call it. The entry never returns
// (a finished fiber switches away for good); the CFI marks the outermost
// frame for debuggers and unwinders.
asm(R"(
  .text
  .p2align 4
  .globl weft_jump_fcontext
  .hidden weft_jump_fcontext
  .type weft_jump_fcontext, @function
weft_jump_fcontext:
  leaq -0x38(%rsp), %rsp
  stmxcsr (%rsp)
  fnstcw 0x4(%rsp)
  movq %r12, 0x8(%rsp)
  movq %r13, 0x10(%rsp)
  movq %r14, 0x18(%rsp)
  movq %r15, 0x20(%rsp)
  movq %rbx, 0x28(%rsp)
  movq %rbp, 0x30(%rsp)
  movq %rsp, %rax
  movq %rdi, %rsp
  ldmxcsr (%rsp)
  fldcw 0x4(%rsp)
  movq 0x8(%rsp), %r12
  movq 0x10(%rsp), %r13
  movq 0x18(%rsp), %r14
  movq 0x20(%rsp), %r15
  movq 0x28(%rsp), %rbx
  movq 0x30(%rsp), %rbp
  movl %edx, %ecx
  movq %rsi, %rdx
  movq %rax, %rdi
  testl %ecx, %ecx
  jnz 1f
  leaq 0x38(%rsp), %rsp
  ret
1:
  movq 0x38(%rsp), %r8
  leaq 0x40(%rsp), %rsp
  jmp *%r8
  .size weft_jump_fcontext, . - weft_jump_fcontext

  .p2align 4
  .type weft_context_start, @function
weft_context_start:
  .cfi_startproc
  .cfi_undefined rip
  call *%rbx
  ud2
  .cfi_endproc
  .size weft_context_start, . - weft_context_start
)");

extern "C" void weft_context_start();

namespace weft::detail {

fcontext_t make_fcontext(void* stack_top, std::size_t, void (*entry)(transfer_t)) noexcept {
  // The frame ends 16-byte aligned, so that rsp is aligned at the call in
  // weft_context_start, as the ABI wants before a call.
  auto top = reinterpret_cast<std::uintptr_t>(stack_top) & ~std::uintptr_t{15};
  auto* frame = reinterpret_cast<unsigned char*>(top - 0x40);
  std::memset(frame, 0, 0x40);
  // The new context starts with the creating thread's floating-point modes.
  std::uint32_t mxcsr;
  std::uint16_t x87_control;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(x87_control));
  std::memcpy(frame + 0x00, &mxcsr, sizeof(mxcsr));
  std::memcpy(frame + 0x04, &x87_control, sizeof(x87_control));
  const auto entry_address = reinterpret_cast<std::uintptr_t>(entry);
  const auto start_address = reinterpret_cast<std::uintptr_t>(&weft_context_start);
  std::memcpy(frame + 0x28, &entry_address, sizeof(entry_address));  // rbx
  std::memcpy(frame + 0x38, &start_address, sizeof(start_address));
  return frame;
}

}  // namespace weft::detail

#endif
