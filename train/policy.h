// Mixed-precision policies (tf.keras.mixed_precision.Policy): the dtype a layer computes in
// and the dtype its variables are stored in.
//
//   mixed_precision::set_global_policy("mixed_bfloat16");   // before building the model
//   nn::Dense dense(784, 256);                               // kernel float32, computes in bfloat16
//   nn::Dense out(256, 10, {.dtype = "float32"});            // one layer kept in float32
//
// Names: "float32", "float64", "float16", "bfloat16" (variables and computations in that
// dtype) and "mixed_float16", "mixed_bfloat16" (variables float32, computations in the
// half format). A layer takes the global policy current when it is constructed, unless
// its options name one (`dtype`, which also accepts a DType), exactly as Keras does.
//
// Under a policy a layer (train/nn/module.h):
//  - casts floating inputs to the compute dtype, and floating variables to it when it reads
//    them (Keras's AutoCastVariable), so the cast's gradient brings variable gradients back
//    to the variable dtype;
//  - returns outputs in the compute dtype;
//  - computes normalisation statistics and softmax in float32 when the compute dtype is a
//    half format (BatchNormalization, LayerNormalization, Softmax), casting the result back.
// Losses (train/losses.h) promote half predictions to float32, so a loss and its reduction
// are float32. With mixed_float16, wrap the optimizer in an optim::LossScaleOptimizer
// (train/loss_scale_optimizer.h) so that small float16 gradients do not underflow.
//
// The global policy is process-wide (as in Keras) and guarded by a mutex, so replica
// threads may read it while layers are built elsewhere.
#pragma once

#include <string>

#include <strata/core/dtype.h>
#include <strata/core/tensor.h>

namespace strata::mixed_precision {

class Policy {
 public:
  Policy() : Policy(kFloat32) {}
  // Implicit so that a layer option `dtype = kFloat64` or `dtype = "mixed_float16"` reads
  // naturally. A dtype must be floating.
  Policy(DType dtype);              // NOLINT(google-explicit-constructor)
  Policy(const std::string& name);  // NOLINT(google-explicit-constructor)
  Policy(const char* name) : Policy(std::string(name)) {}  // NOLINT

  const std::string& name() const { return name_; }
  DType compute_dtype() const { return compute_dtype_; }
  DType variable_dtype() const { return variable_dtype_; }
  // True for mixed_float16 / mixed_bfloat16.
  bool is_mixed() const { return compute_dtype_ != variable_dtype_; }

  friend bool operator==(const Policy& a, const Policy& b) { return a.name_ == b.name_; }

 private:
  std::string name_;
  DType compute_dtype_;
  DType variable_dtype_;
};

// The policy layers take when built without one ("float32" until set).
Policy global_policy();
void set_global_policy(const Policy& policy);

// Sets the global policy for its lifetime and restores the previous one (tests, or a
// program that builds one model in mixed precision and another in float32).
class PolicyScope {
 public:
  explicit PolicyScope(const Policy& policy);
  ~PolicyScope();
  PolicyScope(const PolicyScope&) = delete;
  PolicyScope& operator=(const PolicyScope&) = delete;

 private:
  Policy previous_;
};

// x cast to `dtype` when x is floating and of another dtype; otherwise x itself (integer
// and bool tensors, such as labels and ids, are never cast).
Tensor autocast(const Tensor& x, DType dtype);

}  // namespace strata::mixed_precision
