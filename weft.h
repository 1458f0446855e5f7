// weft: M:N green threads for C++20. The one header users include.
//
//   #include <weft/weft.h>
//
//   weft::Scheduler sched;                       // one worker per core
//   weft::BlockingQueue<int> queue{64};
//   weft::Fiber producer = sched.spawn([&] { for (int i = 0; i < 100; ++i) queue.put(i); });
//   weft::Fiber consumer = sched.spawn([&] { for (int i = 0; i < 100; ++i) use(queue.take()); });
//   producer.join();
//   consumer.join();
#pragma once

#include "runtime/fiber.h"
#include "runtime/fiber_local.h"
#include "runtime/stack.h"
#include "sched/config.h"
#include "sched/scheduler.h"
#include "sched/this_fiber.h"
#include "sync/blocking_queue.h"
#include "sync/condition_variable.h"
#include "sync/future.h"
#include "sync/latch.h"
#include "sync/mutex.h"
#include "sync/queue_closed.h"
#include "sync/semaphore.h"
#include "sync/wait_group.h"
