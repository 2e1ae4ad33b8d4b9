// poll_for: the first half of a two-phase wait. A peer that hands over work or arrives at
// a rendezvous usually does so within microseconds, far sooner than a futex sleep and
// wake-up would take (tens of microseconds, more on a loaded machine), so waiters first
// check a condition for a short budget, yielding the core between checks — a thread that
// shares the core (the peer itself, on a machine with fewer cores than threads) runs
// meanwhile — and only then sleep on their own primitive (a condition variable, a futex).
// Used by the intra-op pool, parked threads, the prefetch hand-off and the in-process
// collectives' rendezvous.
#pragma once

#include <chrono>
#include <thread>

namespace strata {

// Calls `ready()` until it returns true or `budget` has passed, yielding between calls.
// Returns the last value of `ready()`. The condition must be cheap and thread-safe (an
// atomic load).
template <typename Ready>
bool poll_for(Ready&& ready, std::chrono::steady_clock::duration budget) {
  if (ready()) return true;
  const auto until = std::chrono::steady_clock::now() + budget;
  while (std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
    if (ready()) return true;
  }
  return false;
}

}  // namespace strata
