// A small JSON reader for weft-dump: enough to read the dump server's
// answer (introspect/dump_format.h) back into a tree. Numbers keep their text so
// that 64-bit counters are read exactly, not through a double.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::tools {

class JsonValue {
 public:
  enum class Type { null, boolean, number, string, array, object };

  Type type() const noexcept { return type_; }
  bool is_null() const noexcept { return type_ == Type::null; }

  // Accessors throw JsonError when the value has another type; the object
  // accessors return a null value for a missing key.
  bool as_bool() const;
  std::uint64_t as_uint() const;
  std::int64_t as_int() const;
  double as_double() const;
  const std::string& as_string() const;
  const std::vector<JsonValue>& as_array() const;
  const JsonValue& operator[](const std::string& key) const;
  bool has(const std::string& key) const;

  // Shorthands for a member: obj.str("name") is obj["name"].as_string().
  const std::string& str(const std::string& key) const { return (*this)[key].as_string(); }
  std::uint64_t uint(const std::string& key) const { return (*this)[key].as_uint(); }
  std::int64_t integer(const std::string& key) const { return (*this)[key].as_int(); }

 private:
  friend class JsonParser;
  Type type_ = Type::null;
  bool boolean_ = false;
  std::string text_;  // a string's value, or a number's digits
  std::vector<JsonValue> array_;
  // Members in document order, searched linearly: the dump's objects have
  // at most sixteen keys, and a map's node per key made parsing a
  // 100,000-fiber dump several times slower.
  std::vector<std::pair<std::string, JsonValue>> object_;
};

struct JsonError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses one JSON document (surrounding whitespace allowed); throws JsonError.
JsonValue parse_json(std::string_view text);

}  // namespace weft::tools

namespace weft::tools {

// A byte buffer grown with realloc: a big one is mmap'd, so growing it
// remaps pages instead of copying them, and nothing is zeroed first. A
// 30 MB dump received into a std::string spent most of its time copying.
class ByteBuffer {
 public:
  ByteBuffer() = default;
  ~ByteBuffer() { std::free(data_); }
  ByteBuffer(ByteBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  ByteBuffer& operator=(ByteBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
    return *this;
  }

  char* data() noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::string_view view() const noexcept { return {data_, size_}; }
  // Room for at least `bytes` more at data() + size(); fill, then commit().
  char* reserve_tail(std::size_t bytes) {
    if (capacity_ - size_ < bytes) {
      const std::size_t capacity = std::max(capacity_ * 2, size_ + bytes);
      void* grown = std::realloc(data_, capacity);
      if (grown == nullptr) throw std::bad_alloc();
      data_ = static_cast<char*>(grown);
      capacity_ = capacity;
    }
    return data_ + size_;
  }
  void commit(std::size_t bytes) noexcept { size_ += bytes; }
  void clear() noexcept { size_ = 0; }
  void append(const char* bytes, std::size_t count) {
    std::memcpy(reserve_tail(count), bytes, count);
    commit(count);
  }

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

// A pull reader for large documents (a 100,000-fiber dump is ~30 MB): it
// walks the text once and builds nothing. Strings are unescaped in place,
// so the text must be writable and outlive the views it hands out.
//
//   cursor.begin_object();
//   for (std::string_view key; cursor.next_key(key);)
//     if (key == "id") id = cursor.uint(); else cursor.skip();
class JsonCursor {
 public:
  JsonCursor(char* text, std::size_t size) : text_(text), size_(size) {}

  void begin_object();
  // The next member's key, false (and the object consumed) at its end.
  bool next_key(std::string_view& key);
  void begin_array();
  // True if another element follows, false (and the array consumed) at its end.
  bool next_item();

  std::string_view string();
  std::uint64_t uint();
  std::int64_t integer();
  double number();
  bool boolean();
  // Consumes a `null` and returns true, or returns false and consumes nothing.
  bool null();
  void skip();  // any one value
  // Throws unless only whitespace is left.
  void end();

 private:
  static constexpr int kMaxDepth = 64;
  [[noreturn]] void fail(const char* what) const;
  char peek();
  void expect(char c);
  void enter();
  std::string_view number_text();

  char* text_;
  std::size_t size_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  bool first_[kMaxDepth + 1] = {};
};

}  // namespace weft::tools
