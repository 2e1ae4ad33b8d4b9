#include <strata/distribute/no_sync.h>

#include <strata/distribute/replica_context.h>
#include <strata/distribute/strategy.h>

namespace strata::distribute {

NoSyncScope::NoSyncScope() {
  const ReplicaContext* ctx = detail::current_replica_context();
  STRATA_CHECK(!ctx || !ctx->strategy().communication_options().aggregate_gradients_in_backward,
               "distribute::no_sync: the strategy sums gradients in backward "
               "(CommunicationOptions::aggregate_gradients_in_backward), so its apply_gradients takes every "
               "gradient as the replicas' sum already: gradients accumulated under no_sync would be applied "
               "unreduced. Accumulate without that option, or without no_sync");
}

}  // namespace strata::distribute
