// A small JSON reader for weft-dump: enough to read the dump server's
// answer (sched/dump_format.h) back into a tree. Numbers keep their text so
// that 64-bit counters are read exactly, not through a double.
#pragma once

#include <cstdint>
#include <memory>
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
