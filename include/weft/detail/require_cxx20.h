// weft's headers are C++20. weft.pc passes no -std= (it would override the
// user's own -std=c++23), so the requirement is checked here instead.
#pragma once

static_assert(__cplusplus >= 202002L, "weft needs C++20 or later: compile with -std=c++20 (or -std=c++23, ...)");
