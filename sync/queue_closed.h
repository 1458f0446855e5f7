// weft::QueueClosed: how every weft queue reports that it was closed.
#pragma once

#include <stdexcept>

namespace weft {

class QueueClosed : public std::runtime_error {
 public:
  QueueClosed() : std::runtime_error("weft::BlockingQueue is closed") {}
};

}  // namespace weft
