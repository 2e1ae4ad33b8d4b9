#include <strata/autograd/custom_gradient.h>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/core/recorder.h>

namespace strata::autograd {

Tensor custom_gradient(const std::vector<Tensor>& inputs,
                       const std::function<CustomResult(const std::vector<Tensor>&)>& fn) {
  CustomResult result;
  {
    StopRecording pause;  // only the custom node is taped, not fn's internals
    result = fn(inputs);
  }
  STRATA_CHECK(result.output.defined(), "custom_gradient: the function returned an undefined output");
  STRATA_CHECK(static_cast<bool>(result.vjp), "custom_gradient: the function returned no gradient function");
  // A fresh handle on the output's memory, so the tape sees a tensor that only this node made.
  const Tensor& o = result.output;
  Tensor out = Tensor::view_of(o.storage(), o.offset(), o.shape(), o.strides(), o.dtype());
  const OpAttrs attrs(CustomGradientAttrs{std::make_shared<const CustomVjp>(std::move(result.vjp))});
  const Tensor outs[1] = {out};
  record_op(OpId::CustomGradient, attrs, inputs, outs);
  return out;
}

}  // namespace strata::autograd
