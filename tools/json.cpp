#include "json.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>

namespace weft::tools {
namespace {

// The value of the four hex digits of a \uXXXX escape, or -1.
int hex4_value(const char* digits) noexcept {
  int code = 0;
  for (int i = 0; i < 4; ++i) {
    const char h = digits[i];
    code <<= 4;
    if (h >= '0' && h <= '9')
      code |= h - '0';
    else if (h >= 'a' && h <= 'f')
      code |= h - 'a' + 10;
    else if (h >= 'A' && h <= 'F')
      code |= h - 'A' + 10;
    else
      return -1;
  }
  return code;
}

}  // namespace

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  JsonValue document() {
    JsonValue value = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the document");
    return value;
  }

 private:
  // Deep enough for any dump, shallow enough that hostile input cannot
  // overflow the stack.
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void fail(const std::string& what) const {
    throw JsonError("malformed JSON at byte " + std::to_string(pos_) + ": " + what);
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t' || text_[pos_] == '\r'))
      ++pos_;
  }

  char peek() {
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end");
    return text_[pos_];
  }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  JsonValue parse_value(int depth) {
    if (depth > kMaxDepth) fail("nested too deeply");
    JsonValue value;
    const char c = peek();
    if (c == '{') {
      value.type_ = JsonValue::Type::object;
      ++pos_;
      if (peek() == '}') {
        ++pos_;
        return value;
      }
      for (;;) {
        if (peek() != '"') fail("expected a key");
        std::string key = parse_string();
        expect(':');
        value.object_.emplace_back(std::move(key), parse_value(depth + 1));
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return value;
      }
    }
    if (c == '[') {
      value.type_ = JsonValue::Type::array;
      ++pos_;
      if (peek() == ']') {
        ++pos_;
        return value;
      }
      for (;;) {
        value.array_.push_back(parse_value(depth + 1));
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return value;
      }
    }
    if (c == '"') {
      value.type_ = JsonValue::Type::string;
      value.text_ = parse_string();
      return value;
    }
    if (literal("null")) return value;
    if (literal("true") || literal("false")) {
      value.type_ = JsonValue::Type::boolean;
      value.boolean_ = text_[pos_ - 1] == 'e' && text_[pos_ - 2] == 'u';
      return value;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      const std::size_t start = pos_;
      ++pos_;
      while (pos_ < text_.size() &&
             (std::isdigit(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.' || text_[pos_] == 'e' ||
              text_[pos_] == 'E' || text_[pos_] == '+' || text_[pos_] == '-'))
        ++pos_;
      value.type_ = JsonValue::Type::number;
      value.text_ = std::string(text_.substr(start, pos_ - start));
      return value;
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  std::string parse_string() {
    ++pos_;  // the opening quote
    std::string out;
    for (;;) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          append_utf8(out, parse_hex4());
          break;
        default:
          fail("bad escape");
      }
    }
  }

  unsigned parse_hex4() {
    if (pos_ + 4 > text_.size()) fail("short \\u escape");
    const int code = hex4_value(text_.data() + pos_);
    if (code < 0) fail("bad \\u escape");
    pos_ += 4;
    return static_cast<unsigned>(code);
  }

  // Surrogate pairs are not joined: the dump only escapes control bytes.
  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

namespace {

[[noreturn]] void wrong_type(const char* wanted) { throw JsonError(std::string("JSON value is not ") + wanted); }

}  // namespace

bool JsonValue::as_bool() const {
  if (type_ != Type::boolean) wrong_type("a boolean");
  return boolean_;
}

std::uint64_t JsonValue::as_uint() const {
  if (type_ != Type::number || text_.empty() || text_[0] == '-') wrong_type("an unsigned integer");
  errno = 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(text_.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') wrong_type("an unsigned integer");
  return n;
}

std::int64_t JsonValue::as_int() const {
  if (type_ != Type::number) wrong_type("an integer");
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(text_.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') wrong_type("an integer");
  return n;
}

double JsonValue::as_double() const {
  if (type_ != Type::number) wrong_type("a number");
  return std::strtod(text_.c_str(), nullptr);
}

const std::string& JsonValue::as_string() const {
  if (type_ != Type::string) wrong_type("a string");
  return text_;
}

const std::vector<JsonValue>& JsonValue::as_array() const {
  if (type_ != Type::array) wrong_type("an array");
  return array_;
}

const JsonValue& JsonValue::operator[](const std::string& key) const {
  static const JsonValue missing;
  if (type_ != Type::object) wrong_type("an object");
  for (const auto& [name, value] : object_) {
    if (name == key) return value;
  }
  return missing;
}

bool JsonValue::has(const std::string& key) const {
  if (type_ != Type::object) return false;
  for (const auto& member : object_) {
    if (member.first == key) return true;
  }
  return false;
}

JsonValue parse_json(std::string_view text) { return JsonParser(text).document(); }

}  // namespace weft::tools

namespace weft::tools {

void JsonCursor::fail(const char* what) const {
  throw JsonError("malformed JSON at byte " + std::to_string(pos_) + ": " + what);
}

char JsonCursor::peek() {
  while (pos_ < size_ && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t' || text_[pos_] == '\r'))
    ++pos_;
  if (pos_ >= size_) fail("unexpected end");
  return text_[pos_];
}

void JsonCursor::expect(char c) {
  if (peek() != c) fail("unexpected character");
  ++pos_;
}

void JsonCursor::enter() {
  if (depth_ >= kMaxDepth) fail("nested too deeply");
  first_[++depth_] = true;
}

void JsonCursor::begin_object() {
  expect('{');
  enter();
}

void JsonCursor::begin_array() {
  expect('[');
  enter();
}

bool JsonCursor::next_key(std::string_view& key) {
  if (peek() == '}') {
    ++pos_;
    --depth_;
    return false;
  }
  if (!first_[depth_]) expect(',');
  first_[depth_] = false;
  if (peek() != '"') fail("expected a key");
  key = string();
  expect(':');
  return true;
}

bool JsonCursor::next_item() {
  if (peek() == ']') {
    ++pos_;
    --depth_;
    return false;
  }
  if (!first_[depth_]) expect(',');
  first_[depth_] = false;
  return true;
}

std::string_view JsonCursor::string() {
  expect('"');
  char* const start = text_ + pos_;
  // Most strings have no escape: found whole, nothing moved.
  std::size_t end = pos_;
  while (end < size_ && text_[end] != '"' && text_[end] != '\\') ++end;
  if (end < size_ && text_[end] == '"') {
    pos_ = end + 1;
    return {start, end - (start - text_)};
  }
  char* out = text_ + end;
  pos_ = end;
  for (;;) {
    if (pos_ >= size_) fail("unterminated string");
    const char c = text_[pos_++];
    if (c == '"') return {start, static_cast<std::size_t>(out - start)};
    if (c != '\\') {
      *out++ = c;
      continue;
    }
    if (pos_ >= size_) fail("unterminated escape");
    const char e = text_[pos_++];
    switch (e) {
      case '"':
      case '\\':
      case '/':
        *out++ = e;
        break;
      case 'b':
        *out++ = '\b';
        break;
      case 'f':
        *out++ = '\f';
        break;
      case 'n':
        *out++ = '\n';
        break;
      case 'r':
        *out++ = '\r';
        break;
      case 't':
        *out++ = '\t';
        break;
      case 'u': {
        // \uXXXX is six bytes and its UTF-8 at most three: the unescaped
        // text never overtakes the escaped.
        if (pos_ + 4 > size_) fail("short \\u escape");
        const int hex = hex4_value(text_ + pos_);
        if (hex < 0) fail("bad \\u escape");
        pos_ += 4;
        const unsigned code = static_cast<unsigned>(hex);
        if (code < 0x80) {
          *out++ = static_cast<char>(code);
        } else if (code < 0x800) {
          *out++ = static_cast<char>(0xC0 | (code >> 6));
          *out++ = static_cast<char>(0x80 | (code & 0x3F));
        } else {
          *out++ = static_cast<char>(0xE0 | (code >> 12));
          *out++ = static_cast<char>(0x80 | ((code >> 6) & 0x3F));
          *out++ = static_cast<char>(0x80 | (code & 0x3F));
        }
        break;
      }
      default:
        fail("bad escape");
    }
  }
}

std::string_view JsonCursor::number_text() {
  const char c = peek();
  if (c != '-' && (c < '0' || c > '9')) fail("expected a number");
  const std::size_t start = pos_++;
  while (pos_ < size_ && ((text_[pos_] >= '0' && text_[pos_] <= '9') || text_[pos_] == '.' || text_[pos_] == 'e' ||
                          text_[pos_] == 'E' || text_[pos_] == '+' || text_[pos_] == '-'))
    ++pos_;
  return {text_ + start, pos_ - start};
}

std::uint64_t JsonCursor::uint() {
  const std::string_view digits = number_text();
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) fail("expected an unsigned integer");
  return n;
}

std::int64_t JsonCursor::integer() {
  const std::string_view digits = number_text();
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) fail("expected an integer");
  return n;
}

double JsonCursor::number() {
  const std::string_view digits = number_text();
  double n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) fail("expected a number");
  return n;
}

bool JsonCursor::boolean() {
  const char c = peek();
  if (c == 't' && size_ - pos_ >= 4 && std::string_view(text_ + pos_, 4) == "true") {
    pos_ += 4;
    return true;
  }
  if (c == 'f' && size_ - pos_ >= 5 && std::string_view(text_ + pos_, 5) == "false") {
    pos_ += 5;
    return false;
  }
  fail("expected a boolean");
}

bool JsonCursor::null() {
  if (peek() != 'n') return false;
  if (size_ - pos_ < 4 || std::string_view(text_ + pos_, 4) != "null") fail("expected null");
  pos_ += 4;
  return true;
}

void JsonCursor::skip() {
  const char c = peek();
  std::string_view key;
  if (c == '{') {
    begin_object();
    while (next_key(key)) skip();
  } else if (c == '[') {
    begin_array();
    while (next_item()) skip();
  } else if (c == '"') {
    string();
  } else if (c == 't' || c == 'f') {
    boolean();
  } else if (!null()) {
    number_text();
  }
}

void JsonCursor::end() {
  while (pos_ < size_ && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t' || text_[pos_] == '\r'))
    ++pos_;
  if (pos_ != size_) fail("unexpected text after the document");
}

}  // namespace weft::tools
