// Parked threads: background threads that outlive the task they ran, so that the next
// task (the next epoch's prefetch) starts on a thread that already exists.
//
// Starting a std::thread and joining it cost 150-250 us per epoch here (the new thread
// first ran 100-160 us after std::thread's constructor; the join waited 5-100 us), 3-5%
// of an epoch of shuffled MNIST batches, all of it on the consumer's path: the first batch
// cannot come sooner than the thread that makes it. A parked thread polls for the next
// task a bounded while after each one (kParkPoll, yielding the core on every turn, as the
// thread pool's workers do), so a task posted right after the last one ended (the next
// epoch) starts without a wake-up; after that it sleeps, and exits when no task came for
// kParkIdle.
//
// A task runs to completion on one thread; the caller learns that it ended through its
// own state (prefetch waits for its producer's "done" flag instead of joining).
#pragma once

#include <functional>

namespace strata::data::detail {

// Runs `task` on a parked thread, or on a new one when none is idle. Never blocks on
// another task. The task must not throw (it runs on a thread no one joins).
void run_on_parked_thread(std::function<void()> task);

}  // namespace strata::data::detail
