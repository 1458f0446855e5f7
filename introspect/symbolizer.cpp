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
  const auto symbolize_stack = [&](std::vector<std::uintptr_t>& stack) {
    for (std::size_t i = 0; i < stack.size(); ++i) {
      const std::uintptr_t address = stack[i];
      auto [it, inserted] = known.try_emplace(address, false);
      if (inserted) {
        FrameSymbol symbol;
        it->second = symbolize(address, symbol);
        if (it->second) snapshot.symbols.emplace(address, std::move(symbol));
      }
      if (!it->second) {
        stack.resize(i);
        break;
      }
    }
  };
  for (SchedulerSnapshot& scheduler : snapshot.schedulers)
    for (FiberSnapshot& fiber : scheduler.fibers) symbolize_stack(fiber.stack);
  for (ThreadSnapshot& thread : snapshot.threads) symbolize_stack(thread.stack);
}

}  // namespace weft::detail
