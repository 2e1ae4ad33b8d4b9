// add_n: tf.math.add_n over the add op (core/ops.h).
#include <strata/core/error.h>
#include <strata/core/ops.h>

namespace strata {

Tensor add_n(const std::vector<Tensor>& inputs) {
  STRATA_CHECK(!inputs.empty(), "add_n: expected at least one input, got none");
  const Tensor& first = inputs.front();
  STRATA_CHECK(first.defined(), "add_n: input 0 is undefined");
  Tensor total = first;
  for (size_t i = 1; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    STRATA_CHECK(t.defined(), "add_n: input ", i, " is undefined");
    STRATA_CHECK(t.shape() == first.shape() && t.dtype() == first.dtype(), "add_n: input ", i, " is ",
                 shape_str(t.shape()), " ", dtype_name(t.dtype()), " but input 0 is ", shape_str(first.shape()),
                 " ", dtype_name(first.dtype()), " (add_n does not broadcast or promote)");
    total = add(total, t);
  }
  return total;
}

}  // namespace strata
