// WEFT_API marks what libweft exports: the public classes and functions,
// and the few functions in weft::detail that the public headers' templates
// and inline functions call (park, the spawn steps, fiber-local slots...),
// which must be exported for a program to link. libweft is built with
// -fvisibility=hidden and -fvisibility-inlines-hidden (meson.build), so the
// rest, weft's internals and the third-party templates they instantiate,
// stays out of its dynamic symbol table: its ABI is what these headers
// mark, nothing by accident. The interposed libc functions are exported
// too (hooks/, docs/io.md). scripts/check-install fails on any other export.
#pragma once

#define WEFT_API [[gnu::visibility("default")]]
