#include "trace.h"

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "../runtime/fiber_control.h"
#include "raw_lock.h"

namespace weft::detail {

constinit std::atomic<bool> tracing_on{false};

namespace {

// Records per thread and session: about 9 MB a thread at most, enough for
// a few seconds of a busy worker (a PingPong records two per hand-off).
constexpr std::size_t kCapacity = 200'000;

std::atomic<std::uint32_t> session{0};  // raised by each start_trace_session

struct Buffer {
  int tid = static_cast<int>(::gettid());
  std::atomic<std::uint32_t> session{0};  // of its records; the recorder skips older ones
  std::atomic<std::size_t> count{0};
  std::atomic<std::size_t> dropped{0};
  std::uint64_t next_flow = 0;
  std::unique_ptr<TraceRecord[]> records{new TraceRecord[kCapacity]};
};

struct Buffers {
  RawMutex lock;
  std::vector<Buffer*> all;
};
Buffers& buffers() {
  static Buffers* const instance = new Buffers;  // never destroyed: threads end after static destruction too
  return *instance;
}

// The calling thread's buffer, made on its first record and unlisted (and
// freed) when the thread ends.
struct Owner {
  Buffer* buffer = nullptr;
  ~Owner() {
    if (buffer == nullptr) return;
    std::lock_guard guard(buffers().lock);
    auto& all = buffers().all;
    all.erase(std::remove(all.begin(), all.end(), buffer), all.end());
    delete buffer;
  }
};
thread_local Owner owner;

Buffer& my_buffer() {
  if (owner.buffer == nullptr) {
    owner.buffer = new Buffer;
    std::lock_guard guard(buffers().lock);
    buffers().all.push_back(owner.buffer);
  }
  Buffer& b = *owner.buffer;
  // A new session starts it afresh: the recorder of the last one is done.
  const std::uint32_t now = session.load(std::memory_order_acquire);
  if (b.session.load(std::memory_order_relaxed) != now) {
    b.count.store(0, std::memory_order_relaxed);
    b.dropped.store(0, std::memory_order_relaxed);
    b.session.store(now, std::memory_order_release);
  }
  return b;
}

Buffer* buffer_or_null() noexcept {
  try {
    return &my_buffer();
  } catch (...) {  // out of memory: this thread records nothing
    return nullptr;
  }
}

// The calling thread's buffer if it has room, else null (and the record
// counted as dropped): asked before a record is made, so that a full
// buffer costs a recording point little. Only the owner writes the
// counts (the recorder reads them): no read-modify-write is needed.
Buffer* buffer_with_room() noexcept {
  Buffer* b = buffer_or_null();
  if (b == nullptr) return nullptr;
  if (b->count.load(std::memory_order_relaxed) < kCapacity) return b;
  b->dropped.store(b->dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return nullptr;
}

// `b` is buffer_with_room()'s answer, not null.
void record(const TraceRecord& r, Buffer* b) noexcept {
  const std::size_t n = b->count.load(std::memory_order_relaxed);
  b->records[n] = r;
  b->count.store(n + 1, std::memory_order_release);
}

}  // namespace

void trace_switch(FiberControl* left, TraceLeft why, FiberControl* fiber) noexcept {
  Buffer* b = buffer_with_room();
  if (b == nullptr) return;
  TraceRecord r{};
  r.ns = fast_now_ns();
  r.kind = TraceKind::switch_to;
  r.why = why;
  if (left != nullptr) {
    r.left = left->id;
    if (why == TraceLeft::parked) {
      r.wait_kind = left->wait_kind.load(std::memory_order_relaxed);
      r.wait_operation = left->wait_operation.load(std::memory_order_relaxed);
    }
  }
  if (fiber != nullptr) {
    r.fiber = fiber->id;
    r.flow = fiber->trace_flow;
    fiber->trace_flow = 0;
  }
  record(r, b);
}

void trace_wake(FiberControl& fiber) noexcept {
  Buffer* b = buffer_with_room();
  if (b == nullptr) return;
  TraceRecord r{};
  r.ns = fast_now_ns();
  r.kind = TraceKind::wake;
  r.fiber = fiber.id;
  // Unique in the session: the waker's tid above, its own count below.
  r.flow = static_cast<std::uint64_t>(static_cast<std::uint32_t>(b->tid)) << 32 | (++b->next_flow & 0xffffffffu);
  fiber.trace_flow = r.flow;
  record(r, b);
}

void trace_steal(std::uint64_t fiber, unsigned victim) noexcept {
  if (Buffer* b = buffer_with_room())
    record({fast_now_ns(), fiber, 0, 0, nullptr, nullptr, victim, TraceKind::steal, TraceLeft::none}, b);
}

void trace_handoff(unsigned worker, std::size_t moved) noexcept {
  if (Buffer* b = buffer_with_room())
    record({fast_now_ns(), worker, 0, 0, nullptr, nullptr, static_cast<std::uint32_t>(moved), TraceKind::handoff,
            TraceLeft::none},
           b);
}

void trace_poll(int events) noexcept {
  if (Buffer* b = buffer_with_room())
    record({fast_now_ns(), 0, 0, 0, nullptr, nullptr, static_cast<std::uint32_t>(events), TraceKind::poll,
            TraceLeft::none},
           b);
}

void start_trace_session() noexcept {
  session.fetch_add(1, std::memory_order_acq_rel);
  tracing_on.store(true, std::memory_order_release);
}

void stop_trace_session() noexcept { tracing_on.store(false, std::memory_order_release); }

void for_each_trace_buffer(
    const std::function<void(int tid, const TraceRecord* records, std::size_t count, std::size_t dropped)>& each) {
  const std::uint32_t now = session.load(std::memory_order_acquire);
  std::lock_guard guard(buffers().lock);
  for (Buffer* b : buffers().all) {
    // A buffer not written in this session holds an older one's records.
    if (b->session.load(std::memory_order_acquire) != now) continue;
    const std::size_t count = b->count.load(std::memory_order_acquire);
    if (count != 0) each(b->tid, b->records.get(), count, b->dropped.load(std::memory_order_relaxed));
  }
}

}  // namespace weft::detail
