// The fused optimizer updates and AllFinite (core/ops.h) have no gradient: an update
// overwrites the variables it reads, and all_finite is a bool.
#include <strata/autograd/gradient_registry.h>

namespace strata::autograd {

void register_optimizer_gradients() {
  for (OpId op : {OpId::SgdUpdate, OpId::AdamUpdate, OpId::AllFinite}) mark_not_differentiable(op);
}

}  // namespace strata::autograd
