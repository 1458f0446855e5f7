// weft::QueueClosed: how every weft queue reports that it was closed.
#pragma once

#include <stdexcept>

#include "detail/require_cxx20.h"

namespace weft {

class QueueClosed : public std::runtime_error {
 public:
  QueueClosed() : std::runtime_error("weft::BlockingQueue is closed") {}
};

}  // namespace weft
