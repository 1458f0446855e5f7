// weft::version(): the library's own copy of WEFT_VERSION_STRING, so that a
// program can compare the libweft it loaded with the headers it was built
// against.
#include <weft/version.h>

namespace weft {

const char* version() noexcept { return WEFT_VERSION_STRING; }

}  // namespace weft
