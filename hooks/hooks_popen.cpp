// popen and pclose whose stream parks a fiber: glibc's popen stream reads
// and writes its pipe with libc's internal read and write, which no hook
// reaches, so an fgets on it would block the worker until the command
// writes. Here the stream is a fopencookie(3) stream whose reads and
// writes are the hooked read and write of the pipe (a fiber parks on it;
// a plain thread blocks as before), and whose close waits for the command
// through wait_for_child (a fiber parks on a pidfd).
//
// What stays as glibc's popen(3) has it:
//   - the command runs as `sh -c command` (posix_spawn of /bin/sh), its
//     stdout (mode "r") or stdin ("w") the pipe; "e" makes the caller's
//     end close-on-exec; any other mode is EINVAL; a shell that cannot
//     be started (posix_spawn fails: E2BIG, EAGAIN...) is ENOMEM;
//   - streams from earlier popen calls that are still open are closed in
//     the new child (POSIX), so a child never holds another's pipe;
//   - ftell and fseek fail with ESPIPE (lseek of the pipe), and the
//     buffer is the pipe's st_blksize (4096), not BUFSIZ;
//   - fileno() gives the pipe's fd (the FILE's public _fileno, which
//     fopencookie sets to -2, holds it; glibc's cookie stream functions
//     never read it);
//   - pclose, and fclose, of such a stream flush it, close the pipe, wait
//     for the command (retrying EINTR) and return its wait status, or -1
//     with ECHILD if it was reaped elsewhere.
// As with system(), one implementation serves every caller while the hooks
// are on: one list of open streams, for the POSIX rule above.
//
// Not as glibc: a stream shared by two fibers at once. stdio's FILE lock
// belongs to a thread, and a fiber parked in a read holds it; another fiber
// on the same worker taking the same FILE would enter it as its owner. Use
// a stream from one fiber at a time (or lock it with a weft::Mutex).
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "child_processes.h"
#include "hook_support.h"
#include "real_calls.h"

extern char** environ;

namespace weft::detail {
namespace {

struct PipeStream {
  int fd;
  pid_t pid;
  PipeStream* next;
  char* buffer;  // the stream's, as glibc sizes it (open_pipe_stream); freed at close
};

// The streams open now, newest first; guarded by streams_lock, which is
// also held across the spawn, so that two concurrent popens close each
// other's pipes in their children.
std::mutex streams_lock;
PipeStream* streams = nullptr;

void unlink_stream(PipeStream* stream) {
  const std::lock_guard guard(streams_lock);
  for (PipeStream** link = &streams; *link != nullptr; link = &(*link)->next) {
    if (*link == stream) {
      *link = stream->next;
      return;
    }
  }
}

ssize_t read_stream(void* cookie, char* buf, size_t n) { return ::read(static_cast<PipeStream*>(cookie)->fd, buf, n); }

// stdio takes a short write for an error: write everything, or fail at
// the first error, as glibc's _IO_new_file_write does. EINTR too (a
// handler without SA_RESTART, on a plain thread): it is not retried.
ssize_t write_stream(void* cookie, const char* buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::write(static_cast<PipeStream*>(cookie)->fd, buf + done, n - done);
    if (r < 0) break;
    done += size_t(r);
  }
  return ssize_t(done);
}

// glibc's stream seeks its fd (lseek): on a pipe, -1 with ESPIPE, which
// ftell and fseek report and fflush of a read stream with unread input
// ignores. Without a seek function a cookie stream's seeks fail with no
// errno, and that fflush fails.
int seek_stream(void* cookie, off64_t* offset, int whence) {
  const off64_t at = ::lseek64(static_cast<PipeStream*>(cookie)->fd, *offset, whence);
  if (at < 0) return -1;
  *offset = at;
  return 0;
}

// glibc's _IO_new_proc_close: unlink, close the pipe, wait for the child.
int close_stream(void* cookie) {
  auto* stream = static_cast<PipeStream*>(cookie);
  unlink_stream(stream);
  const pid_t pid = stream->pid;
  const int closed = ::close(stream->fd);
  std::free(stream->buffer);  // stdio is done with it: nothing is read or written after the close function
  delete stream;
  if (closed < 0) return -1;
  int status = 0;
  pid_t waited;
  do {
    waited = wait_for_child(pid, &status, 0, nullptr);
  } while (waited < 0 && errno_value() == EINTR);
  return waited < 0 ? -1 : status;
}

// "r" or "w", with "e" anywhere after; as glibc parses it.
bool parse_mode(const char* mode, bool& reading, bool& cloexec) {
  bool read_mode = false;
  bool write_mode = false;
  cloexec = false;
  for (const char* c = mode; *c != '\0'; ++c) {
    switch (*c) {
      case 'r':
        read_mode = true;
        break;
      case 'w':
        write_mode = true;
        break;
      case 'e':
        cloexec = true;
        break;
      default:
        return false;
    }
  }
  reading = read_mode;
  return read_mode != write_mode;
}

FILE* open_pipe_stream(const char* command, const char* mode) {
  bool reading = false;
  bool cloexec = false;
  if (!parse_mode(mode, reading, cloexec)) {
    set_errno(EINVAL);
    return nullptr;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return nullptr;  // the hooked pipe2: the fds are tracked
  const int parent_end = reading ? fds[0] : fds[1];
  const int child_end = reading ? fds[1] : fds[0];
  const int child_std = reading ? STDOUT_FILENO : STDIN_FILENO;
  auto* stream = new PipeStream{parent_end, -1, nullptr, nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 onto itself clears FD_CLOEXEC (glibc's posix_spawn does so).
  posix_spawn_file_actions_adddup2(&actions, child_end, child_std);
  char sh[] = "sh";
  char dash_c[] = "-c";
  char* argv[] = {sh, dash_c, const_cast<char*>(command), nullptr};
  int spawn_error;
  {
    const std::lock_guard guard(streams_lock);
    for (const PipeStream* open = streams; open != nullptr; open = open->next)
      if (open->fd != child_std) posix_spawn_file_actions_addclose(&actions, open->fd);
    spawn_error = posix_spawn(&stream->pid, "/bin/sh", &actions, nullptr, argv, environ);
    if (spawn_error == 0) {
      stream->next = streams;
      streams = stream;
    }
  }
  posix_spawn_file_actions_destroy(&actions);
  ::close(child_end);
  if (spawn_error != 0) {
    ::close(parent_end);
    delete stream;
    set_errno(ENOMEM);  // glibc's popen reports any failed spawn so, whatever posix_spawn said
    return nullptr;
  }
  if (!cloexec) ::fcntl(parent_end, F_SETFD, 0);
  FILE* file = fopencookie(stream, reading ? "r" : "w", {read_stream, write_stream, seek_stream, close_stream});
  if (file == nullptr) {
    // The command runs with nothing on the other end; reap it as pclose would.
    const int error = errno_value();
    close_stream(stream);
    set_errno(error);
    return nullptr;
  }
  file->_fileno = parent_end;
  // glibc's stream allocates its buffer at the first read or write, of
  // the pipe's st_blksize (4096) where that is below BUFSIZ; a cookie
  // stream's is BUFSIZ (8192), which would hold back a write glibc's has
  // already sent to the command. setvbuf ignores the size of a buffer it
  // allocates, so the stream is given one.
  struct stat st {};
  if (::fstat(parent_end, &st) == 0 && st.st_blksize > 0 && st.st_blksize < BUFSIZ) {
    stream->buffer = static_cast<char*>(std::malloc(size_t(st.st_blksize)));
    if (stream->buffer != nullptr) std::setvbuf(file, stream->buffer, _IOFBF, size_t(st.st_blksize));
  }
  return file;
}

}  // namespace
}  // namespace weft::detail

using namespace weft::detail;

extern "C" {
// libc's names, interposed: exported, unlike the rest of libweft
// (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)

FILE* popen(const char* command, const char* mode) {
  if (!hooks_enabled()) return real::popen()(command, mode);
  return open_pipe_stream(command, mode);
}

// glibc's pclose is its fclose, whose close function for a popen stream
// waits for the command; a stream of ours closes the same way.
int pclose(FILE* stream) {
  if (!hooks_enabled()) return real::pclose()(stream);
  const CheckpointOnReturn at_return;
  return std::fclose(stream);
}

#pragma GCC visibility pop
}  // extern "C"
