// Name resolution in a fiber: getaddrinfo, getnameinfo, gethostbyname(2)
// (_r), gethostbyaddr(_r) run on the blocking pool (weft::blocking) while
// the fiber parks. They cannot park themselves: glibc's resolver calls its
// own poll/sendto/recvfrom inside libc, where no hook can reach.
//
// errno and h_errno are carried to the helper and back (hooks/offload.h).
//
// Calls that need no lookup run inline: a getaddrinfo whose host is an
// address literal and whose service is a port number (or absent), which
// glibc answers without NSS, DNS or /etc/services (gaih_inet tries the
// literal first), and a getnameinfo asked for the numeric host and no
// service or the numeric one, which is formatting. They cannot block, and
// they are per-request calls of common servers and clients (cpp-httplib
// formats every request's peer with getnameinfo(NI_NUMERICHOST), and its
// httplib::Client resolves "127.0.0.1" per connection): a round trip to a
// helper thread each time would cost more than the call.
#include <arpa/inet.h>
#include <netdb.h>
#include <weft/blocking.h>

#include <cerrno>
#include <type_traits>

#include "hook_support.h"
#include "offload.h"
#include "real_calls.h"

namespace weft::detail {
namespace {

// An IPv4 or IPv6 address literal (inet_pton's forms; inet_aton's looser
// ones, "127.1", take the pool), or no host at all (the wildcard or the
// loopback address, by AI_PASSIVE).
bool is_address_literal(const char* node) noexcept {
  if (node == nullptr) return true;
  unsigned char address[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, node, address) == 1 || ::inet_pton(AF_INET6, node, address) == 1;
}

// A decimal port, or no service: never a lookup in /etc/services.
bool is_port_number(const char* service) noexcept {
  if (service == nullptr) return true;
  if (*service == '\0') return false;
  for (const char* c = service; *c != '\0'; ++c)
    if (*c < '0' || *c > '9') return false;
  return true;
}

// getnameinfo that only formats: the numeric host, and the numeric service
// or none.
bool only_formats(char* service, socklen_t service_len, int flags) noexcept {
  return (flags & NI_NUMERICHOST) != 0 && (service == nullptr || service_len == 0 || (flags & NI_NUMERICSERV) != 0);
}

}  // namespace
}  // namespace weft::detail

using namespace weft::detail;

extern "C" {
// libc's names, interposed: exported, unlike the rest of libweft
// (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)

// Checkpoints (CheckpointOnReturn), apart from the three that return a
// static result: in a fiber they always park on the helper thread anyway,
// and a yield after them would only widen the window in which another
// fiber's call overwrites what they return.
int getaddrinfo(const char* node, const char* service, const addrinfo* hints, addrinfo** result) {
  if (!parking_enabled()) return real::getaddrinfo()(node, service, hints, result);
  const CheckpointOnReturn at_return;
  if (is_address_literal(node) && is_port_number(service)) return real::getaddrinfo()(node, service, hints, result);
  return offloaded([&] { return real::getaddrinfo()(node, service, hints, result); });
}

int getnameinfo(const sockaddr* addr, socklen_t addr_len, char* host, socklen_t host_len, char* service,
                socklen_t service_len, int flags) {
  if (!parking_enabled()) return real::getnameinfo()(addr, addr_len, host, host_len, service, service_len, flags);
  const CheckpointOnReturn at_return;
  if (only_formats(service, service_len, flags))
    return real::getnameinfo()(addr, addr_len, host, host_len, service, service_len, flags);
  return offloaded([&] { return real::getnameinfo()(addr, addr_len, host, host_len, service, service_len, flags); });
}

hostent* gethostbyname(const char* name) {
  if (!parking_enabled()) return real::gethostbyname()(name);
  return offloaded([&] { return real::gethostbyname()(name); });
}

hostent* gethostbyname2(const char* name, int family) {
  if (!parking_enabled()) return real::gethostbyname2()(name, family);
  return offloaded([&] { return real::gethostbyname2()(name, family); });
}

hostent* gethostbyaddr(const void* addr, socklen_t len, int type) {
  if (!parking_enabled()) return real::gethostbyaddr()(addr, len, type);
  return offloaded([&] { return real::gethostbyaddr()(addr, len, type); });
}

int gethostbyname_r(const char* name, hostent* host, char* buf, size_t buf_len, hostent** result, int* host_error) {
  if (!parking_enabled()) return real::gethostbyname_r()(name, host, buf, buf_len, result, host_error);
  const CheckpointOnReturn at_return;
  return offloaded([&] { return real::gethostbyname_r()(name, host, buf, buf_len, result, host_error); });
}

int gethostbyname2_r(const char* name, int family, hostent* host, char* buf, size_t buf_len, hostent** result,
                     int* host_error) {
  if (!parking_enabled()) return real::gethostbyname2_r()(name, family, host, buf, buf_len, result, host_error);
  const CheckpointOnReturn at_return;
  return offloaded([&] { return real::gethostbyname2_r()(name, family, host, buf, buf_len, result, host_error); });
}

int gethostbyaddr_r(const void* addr, socklen_t len, int type, hostent* host, char* buf, size_t buf_len,
                    hostent** result, int* host_error) {
  if (!parking_enabled()) return real::gethostbyaddr_r()(addr, len, type, host, buf, buf_len, result, host_error);
  const CheckpointOnReturn at_return;
  return offloaded([&] { return real::gethostbyaddr_r()(addr, len, type, host, buf, buf_len, result, host_error); });
}

#pragma GCC visibility pop
}  // extern "C"
