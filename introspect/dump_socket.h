// Where weft-dump's sockets live, shared by the in-process server and the
// CLI so that both agree: `$XDG_RUNTIME_DIR/weft/` when that is set, else
// `/tmp/weft-<uid>/`; the directory is private to the user (mode 0700) and
// each process listens on `<pid>.sock` in it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace weft::detail {

// The directory this process would use (it may not exist yet).
std::string dump_socket_directory();

// Every directory a process of this user may have used: its own choice
// depends on its environment, which may differ from the caller's.
std::vector<std::string> dump_socket_directories();

std::string dump_socket_path(const std::string& directory, pid_t pid);

// Creates `directory` (mode 0700) or checks that an existing one is a real
// directory owned by this user and closed to others: a directory another
// user could write in would let them impersonate this process's socket.
// Returns "" on success, else why not.
std::string prepare_dump_socket_directory(const std::string& directory);

}  // namespace weft::detail
