// The intra-op thread pool shared by every CPU kernel.
//
// Sized by STRATA_NUM_THREADS (default: all cores). parallel_for splits [0, n) into
// chunks only when the work repays a thread wake-up (~25-50 us from sleep here, see
// PLATFORM.md); the caller always runs chunks itself and takes any chunk a late worker has
// not claimed yet, so a split never waits on a sleeping worker. A worker polls briefly
// (tens of microseconds, yielding its core) for the next job before it sleeps, so
// back-to-back ops such as a layer's GEMMs reach it without a wake-up. Replica threads
// that already keep the cores busy set a thread-local limit of 1, so replicas x intra-op
// threads never exceed cores.
#pragma once

#include <cstdint>
#include <functional>

namespace strata {

int num_threads();              // the pool's size including the caller
void set_num_threads(int n);    // resizes the pool (call before heavy use)

// Limits intra-op parallelism for ops issued from the calling thread (0 = no limit).
void set_thread_parallelism_limit(int max_threads);
int thread_parallelism_limit();

// The threads an op issued from the calling thread may use: the pool's size under the
// thread-local limit (1 inside a pool chunk, whose nested parallel_for runs inline).
int available_threads();

// Runs fn(begin, end) over [0, n) in chunks. `cost_per_item` is an estimate in
// nanoseconds; work below ~0.5 ms total runs inline on the caller.
void parallel_for(int64_t n, double cost_per_item,
                  const std::function<void(int64_t, int64_t)>& fn);

// Runs fn(begin, end) over [0, n) in exactly min(parts, n) chunks of near-equal size, on
// up to available_threads() threads, without a cost estimate: for callers that planned the
// split themselves (the GEMM, kernels/cpu/gemm_split.h). parts <= 1 runs fn(0, n) inline.
void parallel_for_parts(int64_t n, int parts,
                        const std::function<void(int64_t, int64_t)>& fn);

}  // namespace strata
