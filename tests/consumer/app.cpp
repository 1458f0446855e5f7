// A program built against weft the way another project builds it: with
// pkg-config and with CMake's find_package from an installed prefix
// (scripts/check-install), and as a meson subproject (scripts/check-subproject).
// It checks what a user relies on first: fibers and a queue, a libc call
// that parks (the hooks are interposed for the program, not only for
// libweft), and that the loaded libweft is the one its headers describe.
#include <unistd.h>
#include <weft/weft.h>

#include <cstdio>
#include <cstring>

int main() {
  // A read(2) that is not hooked blocks the one worker for good.
  alarm(60);
  weft::Config config;
  config.workers = 1;
  config.max_threads = config.workers;  // no spare runs the writer while the worker is blocked
  weft::Scheduler sched{config};

  weft::BlockingQueue<int> queue{4};
  weft::Fiber producer = sched.spawn([&] {
    for (int i = 1; i <= 100; ++i) queue.put(i);
  });
  int sum = 0;
  weft::Fiber consumer = sched.spawn([&] {
    for (int i = 0; i < 100; ++i) sum += queue.take();
  });
  producer.join();
  consumer.join();

  // The reader parks in read(2) until the writer, a fiber on the same one
  // worker, has run: only a hooked read lets it run.
  int fds[2];
  if (pipe(fds) != 0) return 1;
  char byte = 0;
  weft::Fiber reader = sched.spawn([&] {
    if (read(fds[0], &byte, 1) != 1) byte = 0;
  });
  weft::Fiber writer = sched.spawn([&] {
    if (write(fds[1], "x", 1) != 1) std::perror("write");
  });
  reader.join();
  writer.join();

  const bool same_version = std::strcmp(weft::version(), WEFT_VERSION_STRING) == 0;
  std::printf("weft %s (headers %s): sum %d, read through the hooks: %c\n", weft::version(), WEFT_VERSION_STRING, sum,
              byte);
  return sum == 5050 && byte == 'x' && same_version ? 0 : 1;
}
