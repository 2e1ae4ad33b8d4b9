// The worker process of the collectives suite's cross-process all-reduce: strata-bench
// re-executes itself as `strata-bench --collectives-worker SPEC` once per rank (SPEC is a
// JSON object written by the suite: rank, size, store port, sizes, repetitions). Each
// worker joins a GlooCommunicator and a separate Gloo context over the suite's TcpStore,
// times strata's all_reduce next to gloo::allreduce called directly, and rank 0 stores
// the timings as JSON under "<prefix>/results" for the suite to read.
#pragma once

#include <string>

namespace strata::bench {

// Runs one worker; returns the process exit status (0 on success; errors are printed).
int collectives_worker_main(const std::string& spec_json);

}  // namespace strata::bench
