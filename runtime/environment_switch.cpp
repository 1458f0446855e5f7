#include "environment_switch.h"

#include <strings.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "log.h"

namespace weft::detail {
namespace {

bool one_of(const char* word, std::initializer_list<const char*> words) noexcept {
  for (const char* candidate : words)
    if (::strcasecmp(word, candidate) == 0) return true;
  return false;
}

bool is_blank(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

bool environment_says_off(const char* name) noexcept {
  const char* const text = std::getenv(name);
  if (text == nullptr) return false;
  const char* value = text;
  // The word, without the blanks around it; one longer than any word is
  // none of them.
  while (is_blank(*value)) ++value;
  std::size_t length = std::strlen(value);
  while (length > 0 && is_blank(value[length - 1])) --length;
  char word[8] = {};
  if (length < sizeof word) std::memcpy(word, value, length);
  if (length < sizeof word) {
    if (length == 0 || one_of(word, {"1", "on", "true", "yes"})) return false;
    if (one_of(word, {"0", "off", "false", "no"})) return true;
  }
  char message[256];
  const int size = std::snprintf(message, sizeof message,
                                 "weft: %s=\"%.64s\" is none of 0, off, false, no (off) or 1, on, true, yes (on); "
                                 "taken as on\n",
                                 name, text);
  if (size > 0) write_stderr(message, std::size_t(size) < sizeof message ? std::size_t(size) : sizeof message - 1);
  return false;
}

}  // namespace weft::detail
