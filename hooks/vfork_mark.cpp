// vfork, interposed only to mark its child. The child of vfork runs on the
// parent thread's memory, its thread-local storage included, until it
// execs or exits, and no fork handler runs for it: to weft it looked like
// the parent's fiber. Its hooked close, dup2 or closefrom then retired the
// parent's fd records (the parent's fibers parked on those fds woke with
// EBADF, a waitpid among them, leaving its child a zombie) and deleted the
// parent's registrations from the shared epoll instance; a hook that
// parked in it would have switched the parent's stacks. POSIX lets a vfork
// child only exec or _exit; closing fds first is common all the same.
//
// A vfork child that execs holds every description not close-on-exec, as
// a spawned one does: vfork counts as a spawn (child_spawning before,
// child_spawned after in the parent), so that the parent no longer takes
// those descriptions for private and flips O_NONBLOCK on them
// (hooks/description_sharing.h). Before, it did not, and a description
// made before a vfork and exec stayed "private".
//
// The mark is a count in the calling thread's storage, which the child
// shares: one up before the system call, one down in the parent once it
// resumes (the child has exec'd or exited by then). in_vfork_child() is
// true while it is up, so the child's hooks are libc's calls, and the fd
// hooks leave the parent's records alone.
//
// In assembly, as glibc's vfork is: the child returns first, through the
// stack it shares with the parent, so the return address is kept in a
// register across the call (the kernel restores the parent's registers),
// not on the stack the child's calls overwrite.
#include <sys/syscall.h>
#include <weft/detail/raw_syscall.h>

#include <cerrno>

#include "description_sharing.h"
#include "hook_support.h"

extern "C" {
// Initial-exec, so that the assembly reaches it with one %fs-relative
// access and no call.
[[gnu::tls_model("initial-exec"), gnu::visibility("hidden")]] constinit thread_local int weft_vfork_children = 0;

// Before the system call, on the parent's stack; and after it, in the
// parent only (hooks/description_sharing.h: the spawn is under way
// between the two).
[[gnu::visibility("hidden")]] void weft_vfork_spawning() noexcept { weft::detail::child_spawning(); }
[[gnu::visibility("hidden")]] void weft_vfork_spawned() noexcept { weft::detail::child_spawned(); }

// vfork's failure: errno from the system call's -errno, as libc's.
[[gnu::visibility("hidden")]] int weft_vfork_failed(long negative_errno) noexcept {
  errno = int(-negative_errno);
  return -1;
}
}

namespace weft::detail {

bool in_vfork_child() noexcept { return weft_vfork_children != 0; }

bool vfork_child_shares_parents_fd(int fd) noexcept {
  // kcmp(2): 0 when both processes' fds name one open file description.
  // Not known (no kcmp, or ptrace rules refuse it): as another process's.
  constexpr int kKcmpFile = 0;  // <linux/kcmp.h>'s KCMP_FILE
  // Raw: errno stays the caller's, whose call succeeded.
  return raw_syscall(SYS_kcmp, raw_syscall(SYS_getpid), raw_syscall(SYS_getppid), kKcmpFile, fd, fd) == 0;
}

}  // namespace weft::detail

// pid_t vfork(void): libc's name, exported (a .globl of assembly is not
// subject to -fvisibility=hidden). x86-64 only; elsewhere libc's vfork,
// unmarked.
#if defined(__x86_64__)
asm(R"(
    .text
    .globl vfork
    .type vfork, @function
    .p2align 4
vfork:
    .cfi_startproc
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call weft_vfork_spawning
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    movq weft_vfork_children@gottpoff(%rip), %rax
    addl $1, %fs:(%rax)
    popq %rdi
    .cfi_adjust_cfa_offset -8
    .cfi_register %rip, %rdi
    movl $58, %eax
    syscall
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rip, 0
    testq %rax, %rax
    jz 1f
    movq weft_vfork_children@gottpoff(%rip), %rsi
    subl $1, %fs:(%rsi)
    pushq %rax
    .cfi_adjust_cfa_offset 8
    call weft_vfork_spawned
    popq %rax
    .cfi_adjust_cfa_offset -8
    cmpq $-4095, %rax
    jae 2f
1:
    ret
2:
    movq %rax, %rdi
    jmp weft_vfork_failed
    .cfi_endproc
    .size vfork, .-vfork
)");
#endif
