// echo_load: closed-loop load for echo_server (docs/benchmarks.md, "Echo
// server"). Opens --connections to 127.0.0.1:PORT; each sends one message,
// waits for all of its echo, checks every byte, and sends the next. A few
// epoll threads (default 1) drive all connections, so 1,000 connections do
// not need 1,000 client threads competing with the server for the cores.
//
//   echo_load --port 7000 --connections 1000 --seconds 3
//   echo_load --port 7000 --connections 100 --seconds 3 --server-pid 1234 --json
//
// Every connection first completes one round trip, then the rest of
// --warmup passes, then the measured interval of --seconds starts: only
// echoes completed inside it count. Prints messages/s, the round trip's
// p50, p99, p99.9 and max, and with --server-pid the server's CPU time per
// message over the same interval (the sum over its threads of /proc/PID/task/*/schedstat, in
// ns; /proc/PID/stat's utime+stime in clock ticks as a cross-check).
//
// Exits 1 if an echo differs from what was sent, a connection fails or
// closes, or no echo completes in the interval; 2 on a usage error.
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cli.h"
#include "echo_net.h"

namespace {

using weft::bench::die_errno;

constexpr const char* kProgram = "echo_load";
constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
// How long connecting, and then every connection's first round trip, may
// take before the server is declared broken.
constexpr std::int64_t kSetupTimeoutNs = 10'000'000'000;

std::int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void sleep_until_ns(std::int64_t deadline) {
  timespec ts{};
  ts.tv_sec = deadline / 1'000'000'000;
  ts.tv_nsec = deadline % 1'000'000'000;
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

std::int64_t process_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// ---------------------------------------------------------------------------
// Round-trip times

// Log-linear buckets, 32 per power of two (HdrHistogram's layout with 5
// bits of sub-bucket): a value is known to within 1/32 of itself, in 15 KiB
// per thread, whatever the number of samples.
class Histogram {
 public:
  static constexpr int kSubBits = 5;
  static constexpr std::uint64_t kSub = 1u << kSubBits;
  static constexpr std::size_t kBuckets = (64 - kSubBits + 1) * kSub;

  void add(std::uint64_t value) {
    ++counts_[index(value)];
    ++total_;
    max_ = std::max(max_, value);
  }
  void merge(const Histogram& other) {
    for (std::size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    total_ += other.total_;
    max_ = std::max(max_, other.max_);
  }
  std::uint64_t total() const { return total_; }
  std::uint64_t max() const { return max_; }  // exact
  // The middle of the bucket holding the sample of rank ceil(q * total),
  // and never above the largest sample.
  double quantile(double q) const {
    if (total_ == 0) return 0;
    const std::uint64_t rank = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(q * total_)));
    std::uint64_t seen = 0;
    std::size_t i = 0;
    for (; i + 1 < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) break;
    }
    return std::min(middle(i), static_cast<double>(max_));
  }

 private:
  static std::size_t index(std::uint64_t v) {
    if (v < kSub) return static_cast<std::size_t>(v);
    const int exponent = 63 - __builtin_clzll(v);               // >= kSubBits
    const std::uint64_t mantissa = v >> (exponent - kSubBits);  // in [kSub, 2 kSub)
    return static_cast<std::size_t>(exponent - kSubBits + 1) * kSub + static_cast<std::size_t>(mantissa - kSub);
  }
  static double middle(std::size_t i) {
    if (i < kSub) return static_cast<double>(i);
    const int exponent = static_cast<int>(i / kSub) + kSubBits - 1;
    const double width = std::ldexp(1.0, exponent - kSubBits);
    return (static_cast<double>(i % kSub + kSub)) * width + width / 2;
  }

  std::uint64_t counts_[kBuckets] = {};
  std::uint64_t total_ = 0;
  std::uint64_t max_ = 0;
};

// ---------------------------------------------------------------------------
// The server's CPU time

struct ServerCpu {
  bool schedstat_ok = false;
  std::unordered_map<long, std::uint64_t> task_ns;  // tid -> time on a CPU
  bool stat_ok = false;
  std::uint64_t stat_ticks = 0;  // utime + stime, every thread, dead ones too
};

std::optional<std::uint64_t> first_number(const std::string& path) {
  std::ifstream in(path);
  std::uint64_t value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

ServerCpu read_server_cpu(long pid) {
  ServerCpu cpu;
  const std::string proc = "/proc/" + std::to_string(pid);
  if (DIR* dir = ::opendir((proc + "/task").c_str())) {
    cpu.schedstat_ok = true;
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      // A thread may end between readdir and the read: it is then absent,
      // its last time lost (the stat cross-check keeps it).
      if (const auto ns = first_number(proc + "/task/" + entry->d_name + "/schedstat"))
        cpu.task_ns[std::strtol(entry->d_name, nullptr, 10)] = *ns;
    }
    ::closedir(dir);
    if (cpu.task_ns.empty()) cpu.schedstat_ok = false;
  }
  std::ifstream stat(proc + "/stat");
  std::string line;
  if (std::getline(stat, line)) {
    // The command name may hold spaces and parentheses: fields are counted
    // from the last ')', which ends it. utime and stime are fields 14, 15.
    const std::size_t close = line.rfind(')');
    if (close != std::string::npos) {
      std::istringstream fields(line.substr(close + 1));
      std::string skip;
      for (int field = 3; field < 14; ++field) fields >> skip;
      std::uint64_t utime = 0, stime = 0;
      if (fields >> utime >> stime) {
        cpu.stat_ok = true;
        cpu.stat_ticks = utime + stime;
      }
    }
  }
  return cpu;
}

// ---------------------------------------------------------------------------
// Load

struct Options {
  std::uint16_t port = 0;
  std::size_t connections = 100;
  double seconds = 3;
  double warmup = 0.5;
  std::size_t message_bytes = 64;
  unsigned threads = 1;
  std::optional<long> server_pid;
  bool json = false;
};

// The measured interval, kNever until main() sets it (t1 first, then t0
// with release, so that a thread that sees t0 sees t1).
std::atomic<std::int64_t> interval_begin{kNever};
std::atomic<std::int64_t> interval_end{kNever};
std::atomic<std::size_t> connections_warm{0};
std::atomic<bool> failed{false};
std::mutex failure_lock;
std::string failure;

void fail(std::string message) {
  std::lock_guard guard(failure_lock);
  if (failure.empty()) failure = std::move(message);
  failed.store(true);
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Conn {
  int fd = -1;
  std::uint32_t id = 0;
  std::uint64_t seq = 0;  // messages completed
  std::size_t sent = 0;   // bytes of the current message written
  std::size_t got = 0;    // bytes of its echo read
  std::int64_t sent_at = 0;
  bool done = false;  // the interval is over: no more messages
  std::vector<std::uint8_t> out;
  std::vector<std::uint8_t> in;
};

class LoadThread {
 public:
  LoadThread(std::vector<Conn*> conns, std::size_t message_bytes)
      : conns_(std::move(conns)), message_bytes_(message_bytes) {}

  void run() {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) return fail(std::string("epoll_create1: ") + std::strerror(errno));
    for (Conn* conn : conns_) {
      epoll_event event{};
      // Both directions, edge-triggered, once: EPOLLOUT matters only while
      // a message is partly written.
      event.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      event.data.ptr = conn;
      if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, conn->fd, &event) != 0)
        return fail(std::string("epoll_ctl: ") + std::strerror(errno));
    }
    for (Conn* conn : conns_) start_message(*conn, now_ns());

    epoll_event events[256];
    while (!failed.load(std::memory_order_relaxed)) {
      const std::int64_t end = interval_end.load(std::memory_order_acquire);
      const std::int64_t now = now_ns();
      if (now >= end) break;
      // Until the interval is set, wake now and then to look for it.
      const int timeout_ms = end == kNever ? 100 : static_cast<int>((end - now + 999'999) / 1'000'000);
      const int n = ::epoll_wait(epoll_, events, 256, timeout_ms);
      if (n < 0) {
        if (errno == EINTR) continue;
        return fail(std::string("epoll_wait: ") + std::strerror(errno));
      }
      for (int i = 0; i < n && !failed.load(std::memory_order_relaxed); ++i)
        on_ready(*static_cast<Conn*>(events[i].data.ptr), events[i].events);
    }
    ::close(epoll_);
  }

  const Histogram& histogram() const { return histogram_; }

 private:
  void fill(Conn& conn) {
    // Different for every connection and message, so that an echo of the
    // wrong message, or of another connection's, fails the check.
    std::uint64_t x = splitmix64((static_cast<std::uint64_t>(conn.id) << 40) ^ conn.seq);
    for (std::size_t i = 0; i < message_bytes_; ++i) {
      if (i % 8 == 0 && i > 0) x = splitmix64(x);
      conn.out[i] = static_cast<std::uint8_t>(x >> (8 * (i % 8)));
    }
  }

  void start_message(Conn& conn, std::int64_t now) {
    fill(conn);
    conn.sent = 0;
    conn.got = 0;
    conn.sent_at = now;
    send_some(conn);
  }

  void send_some(Conn& conn) {
    while (conn.sent < message_bytes_) {
      const ssize_t n = ::write(conn.fd, conn.out.data() + conn.sent, message_bytes_ - conn.sent);
      if (n >= 0) {
        conn.sent += static_cast<std::size_t>(n);
      } else if (errno == EAGAIN) {
        return;  // the rest on the EPOLLOUT edge
      } else if (errno != EINTR) {
        return fail("connection " + std::to_string(conn.id) + ": write: " + std::strerror(errno));
      }
    }
  }

  void on_ready(Conn& conn, std::uint32_t events) {
    if (conn.done) return;
    if (conn.sent < message_bytes_) send_some(conn);
    for (;;) {
      // One byte more than the echo still owed: a well-behaved server makes
      // every read short, which proves the socket drained (no EAGAIN read),
      // and a server sending too much is caught.
      const std::size_t want = message_bytes_ + 1 - conn.got;
      const ssize_t n = ::read(conn.fd, conn.in.data() + conn.got, want);
      if (n > 0) {
        conn.got += static_cast<std::size_t>(n);
        if (conn.got > conn.sent) {
          return fail("connection " + std::to_string(conn.id) + ": the server sent " + std::to_string(conn.got) +
                      " bytes back for " + std::to_string(conn.sent) + " sent");
        }
        if (conn.got == message_bytes_) complete(conn);
        if (static_cast<std::size_t>(n) < want && (events & EPOLLRDHUP) == 0) return;
        if (conn.done) return;
      } else if (n == 0) {
        return fail("connection " + std::to_string(conn.id) + ": the server closed it after " +
                    std::to_string(conn.seq) + " messages");
      } else if (errno == EAGAIN) {
        return;
      } else if (errno != EINTR) {
        return fail("connection " + std::to_string(conn.id) + ": read: " + std::strerror(errno));
      }
    }
  }

  void complete(Conn& conn) {
    const std::int64_t now = now_ns();
    if (std::memcmp(conn.in.data(), conn.out.data(), message_bytes_) != 0) {
      std::size_t at = 0;
      while (conn.in[at] == conn.out[at]) ++at;
      char detail[160];
      std::snprintf(detail, sizeof detail,
                    ": echo mismatch in message %" PRIu64 " at byte %zu: sent 0x%02x, got 0x%02x", conn.seq, at,
                    conn.out[at], conn.in[at]);
      return fail("connection " + std::to_string(conn.id) + detail);
    }
    if (conn.seq == 0) connections_warm.fetch_add(1, std::memory_order_relaxed);
    ++conn.seq;
    const std::int64_t begin = interval_begin.load(std::memory_order_acquire);
    const std::int64_t end = interval_end.load(std::memory_order_relaxed);
    if (now >= begin && now < end) histogram_.add(static_cast<std::uint64_t>(now - conn.sent_at));
    if (now >= end) {
      conn.done = true;
      return;
    }
    start_message(conn, now);
  }

  std::vector<Conn*> conns_;
  const std::size_t message_bytes_;
  int epoll_ = -1;
  Histogram histogram_;
};

// Connects one socket at a time with a deadline: a server whose accept
// queue is full drops SYNs, and a blocking connect would then wait for the
// kernel's retries with no bound of ours.
int connect_one(std::uint16_t port, std::int64_t deadline, std::string& error) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  const sockaddr_in addr = weft::bench::loopback(port);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
    error = std::string("connect: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  pollfd pfd{fd, POLLOUT, 0};
  for (;;) {
    const std::int64_t left = deadline - now_ns();
    if (left <= 0) {
      error = "connect: timed out";
      ::close(fd);
      return -1;
    }
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left / 1'000'000 + 1, 1000)));
    if (ready > 0) break;
    if (ready < 0 && errno != EINTR) {
      error = std::string("poll: ") + std::strerror(errno);
      ::close(fd);
      return -1;
    }
  }
  int so_error = 0;
  socklen_t len = sizeof so_error;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
  if (so_error != 0) {
    error = std::string("connect: ") + std::strerror(so_error);
    ::close(fd);
    return -1;
  }
  weft::bench::set_nodelay(fd);
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  long server_pid = 0;
  CLI::App app{"echo_load: closed-loop load on an echo server; messages per second and latency", "echo_load"};
  weft::bench::add_count(app, "--port", options.port, std::uint16_t{1}, std::uint16_t{65535},
                         "the echo server on 127.0.0.1")
      ->required();
  weft::bench::add_count(app, "--connections", options.connections, std::size_t{1}, std::size_t{20'000},
                         "connections, each one message in flight");
  app.add_option("--seconds", options.seconds, "measured interval (fractions allowed)")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app.add_option("--warmup", options.warmup, "after every connection's first echo, before the interval")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  weft::bench::add_count(app, "--message-bytes", options.message_bytes, std::size_t{1}, std::size_t{65536},
                         "bytes per message");
  weft::bench::add_count(app, "--threads", options.threads, 1u, 64u, "epoll threads driving the connections");
  CLI::Option* pid_option = weft::bench::add_count(app, "--server-pid", server_pid, 1L, 1L << 30,
                                                   "also report the server's CPU time per message");
  app.add_flag("--json", options.json, "one JSON object on stdout instead of the text");
  weft::bench::parse(app, argc, argv);
  if (pid_option->count() != 0) options.server_pid = server_pid;
  options.threads = static_cast<unsigned>(std::min<std::size_t>(options.threads, options.connections));
  if (options.server_pid && !read_server_cpu(*options.server_pid).stat_ok) {
    std::fprintf(stderr, "%s: cannot read /proc/%ld/stat: is --server-pid right?\n", kProgram, *options.server_pid);
    return 2;
  }

  weft::bench::raise_fd_limit();
  ::signal(SIGPIPE, SIG_IGN);  // a server that goes away must fail a write, not kill us

  // Connect everything before any load, so that the interval measures
  // echoing, not accepting.
  std::vector<Conn> conns(options.connections);
  const std::int64_t connect_deadline = now_ns() + kSetupTimeoutNs;
  for (std::size_t i = 0; i < conns.size(); ++i) {
    std::string error;
    conns[i].fd = connect_one(options.port, connect_deadline, error);
    if (conns[i].fd < 0) {
      std::fprintf(stderr, "%s: connection %zu of %zu to 127.0.0.1:%u: %s\n", kProgram, i + 1, conns.size(),
                   static_cast<unsigned>(options.port), error.c_str());
      return 1;
    }
    conns[i].id = static_cast<std::uint32_t>(i);
    conns[i].out.resize(options.message_bytes);
    conns[i].in.resize(options.message_bytes + 1);
  }

  std::vector<std::unique_ptr<LoadThread>> loads;
  for (unsigned t = 0; t < options.threads; ++t) {
    std::vector<Conn*> mine;
    for (std::size_t i = t; i < conns.size(); i += options.threads) mine.push_back(&conns[i]);
    loads.push_back(std::make_unique<LoadThread>(std::move(mine), options.message_bytes));
  }
  const std::int64_t started = now_ns();
  std::vector<std::thread> threads;
  for (auto& load : loads) threads.emplace_back([&load] { load->run(); });

  const std::int64_t warm_deadline = started + kSetupTimeoutNs;
  while (connections_warm.load() < conns.size() && !failed.load() && now_ns() < warm_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!failed.load() && connections_warm.load() < conns.size()) {
    fail("only " + std::to_string(connections_warm.load()) + " of " + std::to_string(conns.size()) +
         " connections got an echo within 10 s");
  }

  ServerCpu cpu_before, cpu_after;
  std::int64_t load_cpu_before = 0, load_cpu_after = 0;
  const std::int64_t interval_ns = static_cast<std::int64_t>(options.seconds * 1e9);
  std::int64_t begin = 0;
  if (!failed.load()) {
    sleep_until_ns(std::max(now_ns(), started + static_cast<std::int64_t>(options.warmup * 1e9)));
    begin = now_ns();
    interval_end.store(begin + interval_ns, std::memory_order_relaxed);
    interval_begin.store(begin, std::memory_order_release);
    // Each of the server's threads is read at about the same offset into
    // both sweeps, so each is measured over an interval as long as ours.
    if (options.server_pid) cpu_before = read_server_cpu(*options.server_pid);
    load_cpu_before = process_cpu_ns();
    sleep_until_ns(begin + interval_ns);
    load_cpu_after = process_cpu_ns();
    if (options.server_pid) cpu_after = read_server_cpu(*options.server_pid);
  }
  // Wakes threads still waiting for the interval after a failure.
  if (failed.load()) interval_end.store(0, std::memory_order_release);
  for (auto& thread : threads) thread.join();
  for (Conn& conn : conns) ::close(conn.fd);

  if (failed.load()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, failure.c_str());
    return 1;
  }
  Histogram all;
  for (auto& load : loads) all.merge(load->histogram());
  const std::uint64_t messages = all.total();
  if (messages == 0) {
    std::fprintf(stderr, "%s: no echo completed in %.2f s\n", kProgram, options.seconds);
    return 1;
  }

  const double seconds = static_cast<double>(interval_ns) / 1e9;
  const double rate = static_cast<double>(messages) / seconds;
  const double p50_us = all.quantile(0.50) / 1e3;
  const double p99_us = all.quantile(0.99) / 1e3;
  const double p999_us = all.quantile(0.999) / 1e3;
  const double max_us = static_cast<double>(all.max()) / 1e3;
  const double load_cpu_us =
      static_cast<double>(load_cpu_after - load_cpu_before) / 1e3 / static_cast<double>(messages);

  std::optional<double> server_cpu_us, server_stat_cpu_us;
  std::size_t server_tasks = 0, server_tasks_ended = 0;
  if (options.server_pid && cpu_before.schedstat_ok && cpu_after.schedstat_ok) {
    std::uint64_t ns = 0;
    for (const auto& [tid, after] : cpu_after.task_ns) {
      const auto before = cpu_before.task_ns.find(tid);
      // A thread started during the interval ran only inside it.
      ns += after - (before == cpu_before.task_ns.end() ? 0 : std::min(before->second, after));
    }
    for (const auto& [tid, before] : cpu_before.task_ns) server_tasks_ended += cpu_after.task_ns.count(tid) == 0;
    server_tasks = cpu_after.task_ns.size();
    server_cpu_us = static_cast<double>(ns) / 1e3 / static_cast<double>(messages);
  }
  if (options.server_pid && cpu_before.stat_ok && cpu_after.stat_ok) {
    const double tick_us = 1e6 / static_cast<double>(::sysconf(_SC_CLK_TCK));
    server_stat_cpu_us =
        static_cast<double>(cpu_after.stat_ticks - cpu_before.stat_ticks) * tick_us / static_cast<double>(messages);
  }

  auto number_or_null = [](const std::optional<double>& v) {
    if (!v) return std::string("null");
    char text[32];
    std::snprintf(text, sizeof text, "%.4f", *v);
    return std::string(text);
  };
  if (options.json) {
    std::printf(
        "{\"port\": %u, \"connections\": %zu, \"threads\": %u, \"message_bytes\": %zu, \"seconds\": %.3f, "
        "\"messages\": %" PRIu64
        ", \"messages_per_s\": %.1f, \"p50_us\": %.2f, \"p99_us\": %.2f, \"p999_us\": %.2f, "
        "\"max_us\": %.2f, \"server_cpu_us_per_msg\": %s, \"server_cpu_source\": %s, \"server_tasks\": %zu, "
        "\"server_tasks_ended\": %zu, \"server_stat_cpu_us_per_msg\": %s, \"load_cpu_us_per_msg\": %.4f}\n",
        static_cast<unsigned>(options.port), options.connections, options.threads, options.message_bytes, seconds,
        messages, rate, p50_us, p99_us, p999_us, max_us, number_or_null(server_cpu_us).c_str(),
        server_cpu_us ? "\"schedstat\"" : "null", server_tasks, server_tasks_ended,
        number_or_null(server_stat_cpu_us).c_str(), load_cpu_us);
  } else {
    std::printf("echo_load: 127.0.0.1:%u, %zu connections, %zu-byte messages, %u thread%s, %.2f s measured\n",
                static_cast<unsigned>(options.port), options.connections, options.message_bytes, options.threads,
                options.threads == 1 ? "" : "s", seconds);
    std::printf("  messages        %" PRIu64 " (every echo verified)\n", messages);
    std::printf("  messages/s      %.0f\n", rate);
    std::printf("  round trip p50  %.1f us\n", p50_us);
    std::printf("  round trip p99  %.1f us\n", p99_us);
    std::printf("  round trip p99.9 %.1f us\n", p999_us);
    std::printf("  round trip max  %.1f us\n", max_us);
    if (server_cpu_us) {
      std::printf("  server CPU      %.3f us/message (schedstat, %zu threads", *server_cpu_us, server_tasks);
      if (server_tasks_ended > 0) std::printf(", %zu ended uncounted", server_tasks_ended);
      std::printf(")\n");
    }
    if (server_stat_cpu_us)
      std::printf("  server CPU      %.3f us/message (/proc/PID/stat ticks)\n", *server_stat_cpu_us);
    std::printf("  load CPU        %.3f us/message (this process)\n", load_cpu_us);
  }
  return 0;
}
