// GradientReadyHook: told by GradientTape::gradient, while it walks the tape backwards,
// the moment a watched variable's gradient is final (every contribution accumulated), so
// that a data-parallel strategy can start reducing it while backward still runs (what
// PyTorch DDP's autograd hooks do; distribute/gradient_reducer.h is the user).
//
// A hook is installed per thread for a scope (Strategy::run installs one on each replica
// thread). Without one, the tape does no extra work.
#pragma once

#include <strata/autograd/variable.h>
#include <strata/core/tensor.h>

namespace strata::autograd {

class GradientReadyHook {
 public:
  virtual ~GradientReadyHook() = default;
  // `gradient` is what gradient() returns for `variable` (same tensor), final: nothing
  // later in this backward pass adds to it. Called on the thread computing the gradient,
  // once per variable source that receives a gradient, in the order they become final.
  virtual void gradient_ready(const Variable& variable, const Tensor& gradient) = 0;
  // The backward pass finished (normally): every gradient it will report was reported.
  virtual void backward_done() = 0;

  // Product gradients. A hook that accepts them (for the product's dtype and device) is
  // handed, instead of a computed gradient, the factors of a variable's gradient when its
  // only contribution is the weight gradient of a 2-D matmul `x @ variable`: the gradient
  // is transpose(a) @ b (a = x [k, m], b = the output's gradient [k, n]), and the hook
  // computes it (a strategy may compute the replicas' sum of such products at once instead
  // of each replica's product and then their sum). product_ready returns the tensor
  // gradient() reports for the variable, which must be final_gradient's argument later;
  // it is final at once. The default computes the product and reports it.
  virtual bool accepts_product(DType dtype, const Device& device) const { return false; }
  virtual Tensor product_ready(const Variable& variable, const Tensor& a, const Tensor& b);
  // After backward_done: what gradient() returns in place of a gradient it reported
  // (itself, unless the hook says otherwise, e.g. the replicas' sum of it).
  virtual Tensor final_gradient(const Tensor& reported) { return reported; }
};

// Installs `hook` (nullptr: none) on the calling thread for the scope's lifetime; the
// previous hook is restored afterwards.
class GradientHookScope {
 public:
  explicit GradientHookScope(GradientReadyHook* hook);
  ~GradientHookScope();
  GradientHookScope(const GradientHookScope&) = delete;
  GradientHookScope& operator=(const GradientHookScope&) = delete;

 private:
  GradientReadyHook* saved_;
};

// The calling thread's hook, or nullptr.
GradientReadyHook* current_gradient_hook();

}  // namespace strata::autograd
