// member_offset: the offset of a data member in its class, for code that
// reads a member at an address it may not name through a T* (weft-dump's
// quiet reads, sched/wait_owner.h) or hands it to gdb (introspect/
// gdb_layout.cpp).
//
// offsetof is only conditionally supported on a class that is not
// standard-layout, as FiberControl is (its members differ in access), and
// GCC and Clang warn on it (-Winvalid-offsetof). A pointer to a data member
// is that offset, held as a ptrdiff_t, in the Itanium C++ ABI (section 2.3)
// that GCC and Clang follow on every target weft builds for; std::bit_cast
// refuses to compile where the two differ in size. Not a constant
// expression. A member T inherits gives its base's offset: a caller that
// means T's names it (read_member_quietly's std::type_identity_t<T>).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace weft::detail {

template <class T, class M>
std::uintptr_t member_offset(M T::*member) noexcept {
  return static_cast<std::uintptr_t>(std::bit_cast<std::ptrdiff_t>(member));
}

}  // namespace weft::detail
