#include "dump_clients.h"

#include <sys/socket.h>
#include <unistd.h>

#include <iterator>
#include <new>
#include <system_error>

namespace weft::detail {

bool DumpClients::admit(int fd, Clock::time_point accepted) {
  std::lock_guard guard(lock_);
  if (active_ >= kMaxDumpClients) return false;
  const auto it = clients_.insert(clients_.end(), Client{{}, fd, false});
  try {
    it->thread = std::thread([this, it, accepted] {
      serve_(it->fd, accepted);
      leave(*it);
    });
  } catch (const std::system_error&) {
    clients_.erase(it);
    return false;
  }
  ++active_;
  return true;
}

void DumpClients::leave(Client& client) {
  std::lock_guard guard(lock_);
  ::close(client.fd);
  client.fd = -1;
  client.done = true;
  --active_;
}

void DumpClients::reap() {
  std::list<Client> done;
  {
    std::lock_guard guard(lock_);
    for (auto it = clients_.begin(); it != clients_.end();) {
      const auto next = std::next(it);
      if (it->done) done.splice(done.end(), clients_, it);
      it = next;
    }
  }
  for (Client& client : done) client.thread.join();
}

void DumpClients::cut_off() {
  std::list<Client> clients;
  {
    std::lock_guard guard(lock_);
    for (const Client& client : clients_)
      if (client.fd >= 0) ::shutdown(client.fd, SHUT_RDWR);
    clients.splice(clients.end(), clients_);
  }
  for (Client& client : clients) client.thread.join();
}

void DumpClients::forget_in_child() noexcept {
  // The parent's handles, dropped without a call on them: joining or
  // detaching a thread this process does not have is undefined.
  for (Client& client : clients_) {
    new (&client.thread) std::thread();
    if (client.fd >= 0) ::close(client.fd);
  }
  clients_.clear();
  active_ = 0;
}

}  // namespace weft::detail
