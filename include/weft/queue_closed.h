// weft::QueueClosed: how every weft queue reports that it was closed.
#pragma once

#include <stdexcept>

#include "detail/require_cxx20.h"
#include "detail/visibility.h"

namespace weft {

class WEFT_API QueueClosed : public std::runtime_error {
 public:
  QueueClosed() : std::runtime_error("weft::BlockingQueue is closed") {}
};

}  // namespace weft
