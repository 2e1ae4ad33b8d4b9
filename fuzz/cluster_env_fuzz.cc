// Fuzz target: the cluster resolver's environment sources (distribute/cluster_resolver.h
// from_environment): TF_CONFIG, mpirun's, Slurm's (compressed host lists, tasks per node)
// and torchrun's variables. The input is NAME=VALUE lines. A strata::Error is the expected
// outcome of a bad environment; anything else is a finding.
#include <cstdlib>
#include <map>
#include <string>

#include <strata/core/error.h>
#include <strata/distribute/cluster_resolver.h>
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using strata::distribute::ClusterResolver;
  std::map<std::string, std::string> env;
  for (std::string_view line : strata::fuzz::split_parts(strata::fuzz::as_view(data, size), "\n")) {
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  try {
    const ClusterResolver r = ClusterResolver::from_environment([&env](const std::string& name) {
      const auto it = env.find(name);
      return it == env.end() ? std::optional<std::string>() : std::optional<std::string>(it->second);
    });
    const std::string described = r.describe() + r.task_address() + r.rendezvous_address();
    if (r.num_workers() < 1 || r.local_rank() < 0 || r.local_rank() >= r.local_size()) std::abort();
    strata::fuzz::touch(described.data(), described.size());
  } catch (const strata::Error&) {
  }
  return 0;
}
