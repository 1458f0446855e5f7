#include "dump_socket.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace weft::detail {
namespace {

std::string runtime_directory() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  return xdg != nullptr && xdg[0] == '/' ? std::string(xdg) + "/weft" : std::string();
}

std::string fallback_directory() { return "/tmp/weft-" + std::to_string(::geteuid()); }

}  // namespace

std::string dump_socket_directory() {
  std::string directory = runtime_directory();
  return directory.empty() ? fallback_directory() : directory;
}

std::vector<std::string> dump_socket_directories() {
  std::vector<std::string> directories;
  if (std::string directory = runtime_directory(); !directory.empty()) directories.push_back(directory);
  directories.push_back(fallback_directory());
  return directories;
}

std::string dump_socket_path(const std::string& directory, pid_t pid) {
  return directory + "/" + std::to_string(pid) + ".sock";
}

std::string prepare_dump_socket_directory(const std::string& directory) {
  if (::mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST)
    return "cannot create " + directory + ": " + std::strerror(errno);
  struct stat st;
  if (::lstat(directory.c_str(), &st) != 0) return "cannot stat " + directory + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return directory + " is not a directory";
  if (st.st_uid != ::geteuid()) return directory + " belongs to another user";
  if ((st.st_mode & 077) != 0) return directory + " is open to other users (mode must be 0700)";
  return {};
}

}  // namespace weft::detail
