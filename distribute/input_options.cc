#include <strata/distribute/input_options.h>

namespace strata::distribute {

const char* input_replication_mode_name(InputReplicationMode mode) {
  switch (mode) {
    case InputReplicationMode::PerWorker: return "PerWorker";
    case InputReplicationMode::PerReplica: return "PerReplica";
  }
  return "unknown";
}

}  // namespace strata::distribute
