// weft: M:N green threads for C++20. The one header users include.
//
//   #include "weft.h"
//
//   weft::Scheduler sched;                       // one worker per core
//   weft::BlockingQueue<int> queue{64};
//   weft::Fiber producer = sched.spawn([&] { for (int i = 0; i < 100; ++i) queue.put(i); });
//   weft::Fiber consumer = sched.spawn([&] { for (int i = 0; i < 100; ++i) use(queue.take()); });
//   producer.join();
//   consumer.join();
#pragma once

#include "blocking.h"
#include "blocking_queue.h"
#include "condition_variable.h"
#include "config.h"
#include "default_scheduler.h"
#include "detail/require_cxx20.h"
#include "fiber.h"
#include "fiber_list.h"
#include "fiber_local.h"
#include "future.h"
#include "io.h"
#include "latch.h"
#include "log.h"
#include "mutex.h"
#include "pool.h"
#include "queue_closed.h"
#include "scheduler.h"
#include "semaphore.h"
#include "stack_error.h"
#include "this_fiber.h"
#include "thread.h"
#include "wait_group.h"

// Generated in the build tree (version.h.in), hence not relative.
#include <weft/version.h>
