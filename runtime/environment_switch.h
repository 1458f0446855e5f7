// A yes/no environment variable of weft's (WEFT_HOOKS, WEFT_HOOK_LOCKS,
// WEFT_DUMP), read the one way: 0, off, false or no turn the feature off;
// 1, on, true or yes (and unset, or empty) leave it on; in any case, with
// blanks around the word ignored. Any other value is reported on stderr,
// naming the variable and the words, and leaves it on: a misspelt "OFF"
// was taken silently as on.
#pragma once

namespace weft::detail {

// Whether `name` turns its feature off. Reads the environment each time
// (callers read it once); writes to stderr with write(2), not through the
// log handler: the hooks ask before main, and in any thread.
bool environment_says_off(const char* name) noexcept;

}  // namespace weft::detail
