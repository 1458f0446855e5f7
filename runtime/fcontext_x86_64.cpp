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

// weft_jump_fcontext(to = rdi, data = rsi) saves the caller's frame and
// falls into weft_resume_fcontext, which restores the frame at rsp and
// passes transfer_t{rax, rsi}: as the return value (rax, rdx) to a resumed
// context, as the argument (rdi, rsi) to a fresh one.
//
// weft_context_start: a fresh context's first stop. The restore left the
// entry in rbx and rsp 16-byte aligned, as a call wants: call it. When it
// returns {rax = context, rdx = data}, make the last switch from here,
// restoring only: the finished context is never resumed. The CFI marks
// this as the outermost frame for debuggers and unwinders.
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
weft_resume_fcontext:
  ldmxcsr (%rsp)
  fldcw 0x4(%rsp)
  movq 0x8(%rsp), %r12
  movq 0x10(%rsp), %r13
  movq 0x18(%rsp), %r14
  movq 0x20(%rsp), %r15
  movq 0x28(%rsp), %rbx
  movq 0x30(%rsp), %rbp
  movq %rsi, %rdx
  movq %rax, %rdi
  leaq weft_context_start(%rip), %rcx
  cmpq %rcx, 0x38(%rsp)
  je 1f
  leaq 0x38(%rsp), %rsp
  ret
1:
  leaq 0x40(%rsp), %rsp
  jmp weft_context_start
  .size weft_jump_fcontext, . - weft_jump_fcontext

  .p2align 4
  .globl weft_context_start
  .hidden weft_context_start
  .type weft_context_start, @function
weft_context_start:
  .cfi_startproc
  .cfi_undefined rip
  call *%rbx
  movq %rax, %rsp
  movq %rdx, %rsi
  xorl %eax, %eax
  jmp weft_resume_fcontext
  .cfi_endproc
  .size weft_context_start, . - weft_context_start
)");

extern "C" void weft_context_start();

namespace weft::detail {

fcontext_t make_fcontext(void* stack_top, std::size_t, FreshEntry entry) noexcept {
  // The frame ends 16-byte aligned: that is rsp at the call of the entry.
  const auto top = reinterpret_cast<std::uintptr_t>(stack_top) & ~std::uintptr_t{15};
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
