#include "dump_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <type_traits>

#include "dump_fields.h"

namespace weft::detail {
namespace {

using dump::Fields;
using Json = nlohmann::json;

// The document's structure, written by walking the field tables: objects,
// arrays and keys here, each value's text from nlohmann::json (strings) or
// std::to_chars (numbers). Commas are tracked per nesting level.
class Writer {
 public:
  Writer(std::size_t piece, const std::function<bool(std::string_view)>* send) : piece_(piece), send_(send) {
    out_.reserve(piece + 4096);
  }

  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }

  // Field names are the tables' identifiers: nothing to escape.
  void key(std::string_view name) {
    separate();
    out_ += '"';
    out_ += name;
    out_ += "\":";
    after_key_ = true;
  }
  void null() { raw("null"); }
  void boolean(bool flag) { raw(flag ? "true" : "false"); }
  template <class T>
  void integer(T number) {
    char buffer[24];
    const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), number);
    raw(std::string_view(buffer, static_cast<std::size_t>(end - buffer)));
  }
  void number(double value) {
    // Milliseconds: to the microsecond is plenty. JSON has no inf or nan.
    char buffer[48];
    const double rounded = std::isfinite(value) ? std::round(value * 1000) / 1000 : 0;
    const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), rounded);
    raw(std::string_view(buffer, static_cast<std::size_t>(end - buffer)));
  }
  void string(std::string_view text) {
    // Most names are plain printable ASCII, appended as they are; anything
    // else is nlohmann's to escape, invalid UTF-8 replaced by U+FFFD so
    // that the document always parses.
    if (std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; })) {
      separate();
      out_ += '"';
      out_ += text;
      out_ += '"';
    } else {
      json(Json(std::string(text)));
    }
  }
  void json(const Json& value) { raw(value.dump(-1, ' ', false, Json::error_handler_t::replace)); }
  void address(std::uintptr_t value) {
    char buffer[24] = "\"0x";
    const auto [end, ec] = std::to_chars(buffer + 3, buffer + sizeof(buffer) - 1, value, 16);
    *end = '"';
    raw(std::string_view(buffer, static_cast<std::size_t>(end + 1 - buffer)));
  }

  // Hands what is written so far to `send` once there is a piece of it.
  void flush_if_over() {
    if (send_ == nullptr || out_.size() < piece_) return;
    if (sending_) sending_ = (*send_)(out_);
    out_.clear();
  }
  bool finish() {
    out_ += '\n';
    if (send_ == nullptr) return true;
    if (sending_) sending_ = (*send_)(out_);
    out_.clear();
    return sending_;
  }
  std::string take() { return std::move(out_); }

 private:
  void open(char c) {
    separate();
    out_ += c;
    first_ = true;
  }
  void close(char c) {
    out_ += c;
    first_ = false;
  }
  void raw(std::string_view text) {
    separate();
    out_ += text;
  }
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_) out_ += ',';
    first_ = false;
  }

  std::string out_;
  std::size_t piece_;
  const std::function<bool(std::string_view)>* send_;  // null: all in out_
  bool sending_ = true;
  bool first_ = true;
  bool after_key_ = false;
};

// One value, by its member's type and the field's codec.
template <class M>
void write_value(Writer& w, const M& value, dump::Plain) {
  if constexpr (std::is_same_v<M, bool>)
    w.boolean(value);
  else if constexpr (std::is_integral_v<M>)
    w.integer(value);
  else if constexpr (std::is_floating_point_v<M>)
    w.number(value);
  else
    w.string(value);
}
inline void write_value(Writer& w, const void* value, dump::Hex) {
  if (value == nullptr)
    w.null();
  else
    w.address(reinterpret_cast<std::uintptr_t>(value));
}
inline void write_value(Writer& w, std::uintptr_t value, dump::Hex) { w.address(value); }
inline void write_value(Writer& w, const std::vector<std::uintptr_t>& values, dump::HexList) {
  // Addresses only: their names are in the document's "symbols", once
  // however many fibers share them.
  w.begin_array();
  for (const std::uintptr_t value : values) w.address(value);
  w.end_array();
}
inline void write_value(Writer& w, const std::vector<std::uint64_t>& values, dump::IdList) {
  w.begin_array();
  for (const std::uint64_t value : values) w.integer(value);
  w.end_array();
}
template <class M>
void write_value(Writer& w, const M& value, dump::OrNull) {
  if (value == M{})
    w.null();
  else
    write_value(w, value, dump::Plain{});
}

template <class S, class Table>
void write_object(Writer& w, const S& s, const Table& table, DumpDetail detail);

template <class S, class M, class Codec>
void write_entry(Writer& w, const S& s, const dump::Field<S, M, Codec>& f, DumpDetail) {
  w.key(f.name);
  write_value(w, s.*f.member, f.codec);
}
template <class S, class Outer, class M>
void write_entry(Writer& w, const S& s, const dump::Nested<S, Outer, M>& f, DumpDetail) {
  w.key(f.name);
  write_value(w, (s.*f.outer).*f.member, dump::Plain{});
}
template <class S, class Table>
void write_entry(Writer& w, const S& s, const dump::Group<S, Table>& g, DumpDetail detail) {
  w.key(g.name);
  if (g.present(s))
    write_object(w, s, g.fields, detail);
  else
    w.null();
}
template <class S, class R>
void write_entry(Writer& w, const S& s, const dump::Derived<S, R>& d, DumpDetail) {
  w.key(d.name);
  write_value(w, d.value(s), dump::Plain{});
}
template <class S, class E>
void write_entry(Writer& w, const S& s, const dump::FullOnly<S, std::vector<E>>& list, DumpDetail detail) {
  if (detail == DumpDetail::summary || (detail == DumpDetail::metrics && !list.in_metrics)) return;
  w.key(list.name);
  w.begin_array();
  for (const E& element : s.*list.member) {
    write_object(w, element, Fields<E>::table, detail);
    w.flush_if_over();
  }
  w.end_array();
}

template <class S, class Table>
void write_object(Writer& w, const S& s, const Table& table, DumpDetail detail) {
  w.begin_object();
  std::apply([&](const auto&... entry) { (write_entry(w, s, entry, detail), ...); }, table);
  w.end_object();
}

// `"key": [...]`, each element written by its struct's table.
template <class E>
void write_list(Writer& w, std::string_view key, const std::vector<E>& list, DumpDetail detail) {
  w.key(key);
  w.begin_array();
  for (const E& element : list) write_object(w, element, Fields<E>::table, detail);
  w.end_array();
}

void write_document(Writer& w, const ProcessSnapshot& snapshot, DumpDetail detail) {
  using P = Fields<ProcessSnapshot>;
  w.begin_object();
  w.key(P::version);
  w.integer(kDumpFormatVersion);
  w.key(P::process_key);
  write_object(w, snapshot, P::process, detail);
  write_list(w, P::schedulers, snapshot.schedulers, detail);
  write_list(w, P::pools, snapshot.pools, detail);
  if (detail == DumpDetail::full) {
    write_list(w, P::threads, snapshot.threads, detail);
    write_list(w, P::deadlocks, snapshot.deadlocks, detail);
    w.key(P::symbols);
    w.begin_object();
    for (const auto& [address, symbol] : snapshot.symbols) {
      w.key(dump::hex(address));
      write_object(w, symbol, Fields<FrameSymbol>::table, detail);
    }
    w.end_object();
  }
  w.end_object();
}

}  // namespace

std::string to_json(const ProcessSnapshot& snapshot, DumpDetail detail) {
  Writer w(4096, nullptr);
  write_document(w, snapshot, detail);
  w.finish();
  return w.take();
}

bool write_json(const ProcessSnapshot& snapshot, DumpDetail detail,
                const std::function<bool(std::string_view piece)>& send) {
  Writer w(64 * 1024, &send);
  write_document(w, snapshot, detail);
  return w.finish();
}

std::string error_json(const std::string& message) {
  Writer w(256, nullptr);
  w.begin_object();
  w.key(Fields<ProcessSnapshot>::version);
  w.integer(kDumpFormatVersion);
  w.key(Fields<ProcessSnapshot>::error);
  w.string(message);
  w.end_object();
  w.finish();
  return w.take();
}

}  // namespace weft::detail
