// WEFT_API marks what libweft exports: the public classes and functions.
// libweft is built with -fvisibility=hidden (meson.build), so that the rest,
// weft's internals and the third-party templates they instantiate, stays out
// of its dynamic symbol table: its ABI is what the headers mark, nothing by
// accident (scripts/check-install checks the exports).
#pragma once

#define WEFT_API __attribute__((visibility("default")))
