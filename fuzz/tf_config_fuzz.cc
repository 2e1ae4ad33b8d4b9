// Fuzz target: TF_CONFIG's JSON (distribute/cluster_resolver.h from_tf_config), read from
// the environment of every worker. A strata::Error is the expected outcome of a bad
// TF_CONFIG; anything else is a finding.
#include <cstdlib>
#include <string>

#include <strata/core/error.h>
#include <strata/distribute/cluster_resolver.h>
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using strata::distribute::ClusterResolver;
  const std::string text(strata::fuzz::as_view(data, size));
  try {
    const ClusterResolver r =
        ClusterResolver::from_tf_config(text, [](const std::string&) { return std::optional<std::string>(); });
    // What a worker does with a resolver it accepted: none of it may fail any more.
    const std::string described = r.describe() + r.task_address() + r.rendezvous_address();
    if (r.num_workers() < 1 || r.local_rank() < 0 || r.local_rank() >= r.local_size()) std::abort();
    if (r.task_type() == "chief" || r.task_type() == "worker") {
      if (r.worker_rank() < 0 || r.worker_rank() >= r.num_workers()) std::abort();
    }
    strata::fuzz::touch(described.data(), described.size());
  } catch (const strata::Error&) {
  }
  return 0;
}
