#include "symbolizer.h"

#define BOOST_STACKTRACE_LINK  // the compiled backend, libboost_stacktrace_backtrace
#include <dlfcn.h>

#include <boost/stacktrace/frame.hpp>

namespace weft::detail {

bool symbolize(std::uintptr_t return_address, FrameSymbol& symbol) {
  const auto* call = reinterpret_cast<const void*>(return_address - 1);
  Dl_info object{};
  if (::dladdr(call, &object) == 0 || object.dli_fname == nullptr) return false;
  symbol.module = object.dli_fname;
  symbol.offset = return_address - reinterpret_cast<std::uintptr_t>(object.dli_fbase);
  const boost::stacktrace::frame frame(call);
  symbol.function = frame.name();
  symbol.file = frame.source_file();
  symbol.line = static_cast<unsigned>(frame.source_line());
  if (symbol.file.empty()) symbol.line = 0;
  return true;
}

void symbolize_stacks(ProcessSnapshot& snapshot) {
  std::unordered_map<std::uintptr_t, bool> known;  // address -> in a loaded object
  for (SchedulerSnapshot& scheduler : snapshot.schedulers) {
    for (FiberSnapshot& fiber : scheduler.fibers) {
      for (std::size_t i = 0; i < fiber.stack.size(); ++i) {
        const std::uintptr_t address = fiber.stack[i];
        auto [it, inserted] = known.try_emplace(address, false);
        if (inserted) {
          FrameSymbol symbol;
          it->second = symbolize(address, symbol);
          if (it->second) snapshot.symbols.emplace(address, std::move(symbol));
        }
        if (!it->second) {
          fiber.stack.resize(i);
          break;
        }
      }
    }
  }
}

}  // namespace weft::detail
