// The strategies the distribute tests run every case under (strategy_combinations in
// TensorFlow's tests): each test loops over these and labels its assertions with the name.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <strata/distribute/strategy.h>

namespace strata::distribute::testing {

struct StrategyCase {
  std::string label;
  std::function<std::unique_ptr<Strategy>()> make;
};

inline std::vector<StrategyCase> all_strategy_cases() {
  return {
      {"default", [] { return std::unique_ptr<Strategy>(new DefaultStrategy()); }},
      {"one_device(cpu:1)", [] { return std::unique_ptr<Strategy>(new OneDeviceStrategy(cpu(1))); }},
      {"mirrored(1)", [] { return std::unique_ptr<Strategy>(new MirroredStrategy(MirroredStrategy::cpu_devices(1))); }},
      {"mirrored(2)", [] { return std::unique_ptr<Strategy>(new MirroredStrategy(MirroredStrategy::cpu_devices(2))); }},
      {"mirrored(3, hierarchical)",
       [] {
         return std::unique_ptr<Strategy>(
             new MirroredStrategy(MirroredStrategy::cpu_devices(3), CrossDeviceOps::HierarchicalCopyAllReduce));
       }},
      {"central_storage(2)",
       [] { return std::unique_ptr<Strategy>(new CentralStorageStrategy(MirroredStrategy::cpu_devices(2))); }},
  };
}

// Strategies whose variables have one component per replica.
inline bool has_mirrored_variables(const Strategy& s) { return s.name() == "mirrored"; }

}  // namespace strata::distribute::testing

// Catch2's assertions are not thread-safe: code running on replica threads checks with
// this instead; the exception fails the run (and so the test) with the condition's text.
#define REPLICA_REQUIRE(cond)                                                                 \
  do {                                                                                        \
    if (!(cond)) throw std::runtime_error("replica check failed at line " + std::to_string(__LINE__) + ": " #cond); \
  } while (0)
