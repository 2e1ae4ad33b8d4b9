#include <strata/train/nn/flatten.h>

#include <strata/core/ops.h>

namespace strata::nn {

Tensor FlattenImpl::forward(const Tensor& x) {
  STRATA_CHECK(x.ndim() >= 1, "nn::Flatten: expected an input with a batch axis, got a scalar");
  // A rank-1 input becomes [N, 1], as in Keras.
  if (x.ndim() == 1) return reshape(x, {x.dim(0), 1});
  return flatten(x, 1);
}

}  // namespace strata::nn
