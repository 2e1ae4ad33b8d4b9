// The op front-ends: argument checks, shape and dtype inference, output allocation and
// dispatch to the kernel registered for the inputs' device. Every function here throws
// strata::Error naming the op and the offending shapes/dtypes/devices on misuse.
//
// Axes may be negative. Binary ops broadcast like NumPy and promote int/float mixes like
// NumPy; mixing two float widths needs an explicit cast(). A host scalar (a double) takes
// the dtype of the tensor it meets.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <optional>
#include <vector>

#include <strata/core/op_attrs.h>
#include <strata/core/op_id.h>
#include <strata/core/tensor.h>

namespace strata {

// ---- creation (not recorded by autograd) ----
Tensor zeros(const Shape& shape, DType dtype = kFloat32, Device device = current_device());
Tensor ones(const Shape& shape, DType dtype = kFloat32, Device device = current_device());
Tensor full(const Shape& shape, double value, DType dtype = kFloat32, Device device = current_device());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor arange(double start, double stop, double step = 1.0, DType dtype = kFloat32,
              Device device = current_device());
Tensor linspace(double start, double stop, int64_t num, DType dtype = kFloat32,
                Device device = current_device());
Tensor eye(int64_t n, DType dtype = kFloat32, Device device = current_device());
Tensor tensor(std::initializer_list<float> values);  // 1-D float32
Tensor tensor(std::initializer_list<std::initializer_list<float>> rows);  // 2-D float32

// ---- unary ----
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor softplus(const Tensor& x);
Tensor gelu(const Tensor& x, bool approximate_tanh = false);
Tensor erf(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor is_finite(const Tensor& x);    // bool
Tensor logical_not(const Tensor& x);  // bool
Tensor cast(const Tensor& x, DType dtype);
Tensor stop_gradient(const Tensor& x);  // identity whose gradient is zero

// ---- binary, broadcasting ----
Tensor add(const Tensor& a, const Tensor& b);
// The elementwise sum of one or more tensors of one shape and dtype, no broadcasting
// (tf.math.add_n; a composite of add, so it differentiates through add's gradient).
Tensor add_n(const std::vector<Tensor>& inputs);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// relu's gradient in one pass: g where x > 0, else 0 (a NaN x gives 0, as the select
// where(x > 0, g, 0) does; TensorFlow's ReluGrad). Broadcasts like the other binary ops.
Tensor relu_grad(const Tensor& x, const Tensor& g);
Tensor equal(const Tensor& a, const Tensor& b);
Tensor not_equal(const Tensor& a, const Tensor& b);
Tensor less(const Tensor& a, const Tensor& b);
Tensor less_equal(const Tensor& a, const Tensor& b);
Tensor greater(const Tensor& a, const Tensor& b);
Tensor greater_equal(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
// Elementwise cond ? a : b, all three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor clip(const Tensor& x, double lo, double hi);

// Tensor-scalar forms: the scalar takes the tensor's dtype.
Tensor scalar_like(const Tensor& t, double value);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// ---- reductions (std::nullopt = all axes; an explicit empty list reduces nothing, as in
// NumPy and TensorFlow, so computed axis lists need no special case) ----
using Axes = std::optional<std::vector<int64_t>>;
Tensor sum(const Tensor& x, const Axes& axes = std::nullopt, bool keepdims = false);
Tensor mean(const Tensor& x, const Axes& axes = std::nullopt, bool keepdims = false);
Tensor max(const Tensor& x, const Axes& axes = std::nullopt, bool keepdims = false);
Tensor min(const Tensor& x, const Axes& axes = std::nullopt, bool keepdims = false);
Tensor prod(const Tensor& x, const Axes& axes = std::nullopt, bool keepdims = false);
Tensor logsumexp(const Tensor& x, const Axes& axes = std::nullopt, bool keepdims = false);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdims = false);  // int64
Tensor argmin(const Tensor& x, int64_t axis, bool keepdims = false);  // int64
Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive = false, bool reverse = false);

// ---- shape ----
Tensor reshape(const Tensor& x, const Shape& shape);  // one -1 extent is inferred
Tensor permute(const Tensor& x, const std::vector<int64_t>& perm);
Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm);  // = permute
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step = 1);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor expand_dims(const Tensor& x, int64_t axis);
Tensor squeeze(const Tensor& x, int64_t axis);
Tensor flatten(const Tensor& x, int64_t start_axis = 1);  // keeps axes before start_axis
Tensor contiguous(const Tensor& x);
Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
Tensor stack(const std::vector<Tensor>& xs, int64_t axis = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis);
std::vector<Tensor> split(const Tensor& x, int64_t num_splits, int64_t axis);
// pads: (before, after) per axis, e.g. {{0,0},{1,1}}; constant value.
Tensor pad(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& pads,
           double value = 0.0);
// Take along an axis: result shape x.shape[:axis] + indices.shape + x.shape[axis+1:].
Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis = 0);
// The adjoint of gather: zeros of `shape` with updates added at indices along axis.
Tensor scatter_add(const Tensor& updates, const Tensor& indices, const Shape& shape,
                   int64_t axis = 0);
Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype = kFloat32);

// ---- linear algebra ----
// 2-D or batched N-D matmul (NumPy rules: broadcast batch dimensions; 1-D operands are
// promoted and the added axis removed). Transpose flags apply to the last two axes.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false,
              bool transpose_b = false);

// ---- neural-network ops ----
Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);
// logits [N,K], integer labels [N] -> per-example loss [N]. Labels out of range throw.
Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels);
// Normalises over the last axis, then scales by gamma and shifts by beta ([D] each).
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps = 1e-5);
// table [V,D], integer ids of any shape -> ids.shape + [D].
Tensor embedding(const Tensor& table, const Tensor& ids);

// ---- images: NHWC inputs, HWIO filters (TensorFlow's layouts) ----
Tensor conv2d(const Tensor& x, const Tensor& w, std::array<int64_t, 2> strides = {1, 1},
              Padding padding = Padding::Valid);
Tensor conv2d_backprop_input(const Shape& input_shape, const Tensor& w, const Tensor& dy,
                             std::array<int64_t, 2> strides, Padding padding);
Tensor conv2d_backprop_filter(const Tensor& x, const Shape& filter_shape, const Tensor& dy,
                              std::array<int64_t, 2> strides, Padding padding);
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> window,
                  std::array<int64_t, 2> strides, Padding padding = Padding::Valid);
Tensor max_pool2d_grad(const Tensor& x, const Tensor& dy, std::array<int64_t, 2> window,
                       std::array<int64_t, 2> strides, Padding padding);
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> window,
                  std::array<int64_t, 2> strides, Padding padding = Padding::Valid);
Tensor avg_pool2d_grad(const Shape& input_shape, const Tensor& dy,
                       std::array<int64_t, 2> window, std::array<int64_t, 2> strides,
                       Padding padding);
// Output extent and leading pad of one spatial axis under TensorFlow's padding rules.
struct ConvAxis {
  int64_t out = 0;
  int64_t pad_before = 0;
};
ConvAxis conv_output_axis(int64_t in, int64_t k, int64_t stride, Padding padding,
                          const char* op);

// ---- generic entry point (used by autograd for custom gradients and by strata-golden)
// Runs a registered op on prepared inputs/outputs and records it.
void run_and_record(OpId op, const OpAttrs& attrs, std::span<const Tensor> in,
                    std::span<const Tensor> out);

// ---- fused optimizer updates (not recorded by autograd) ----
// Each updates its in-place targets (param and slots) in one pass, evaluating the op-by-op
// formula below in the same order and precision: for float32/float64 the results are
// bitwise those of the formula written with the ops above, except that sqrt here is exact
// where the float32 sqrt op is a vectorised approximation (within a few ulp).
// float16/bfloat16 targets are computed in float32 and rounded once when stored. The targets are contiguous, distinct
// (no two share storage) and on one device; grad has param's shape and dtype and may be
// any view (it is read from a contiguous copy when it is strided or shares storage with a
// target). Scalars are rounded to the compute type, as a host scalar meeting a tensor is.
//
// SGD: d = grad (+ param * weight_decay); with a momentum buffer (required when
// attrs.momentum != 0, used whenever defined): buf = buf * momentum + d,
// d = nesterov ? d + buf * momentum : buf; then param = param - d * learning_rate.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum,
                const SgdAttrs& attrs);
// Adam (attrs.decoupled = false: g = grad + param * weight_decay) and AdamW (decoupled:
// param = param * (1 - learning_rate * weight_decay)), step t = attrs.step >= 1:
// m = m * beta1 + g * (1 - beta1); v = v * beta2 + g * g * (1 - beta2);
// denom = sqrt(v) / sqrt(1 - beta2^t) + epsilon;
// param = param - (m / denom) * (learning_rate / (1 - beta1^t)).
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                 const AdamAttrs& attrs);
// A 0-d bool on the tensors' device: true when every element of every defined tensor is
// finite (integer and bool tensors always are; no tensors at all gives true, on the
// current device). One pass over each tensor, no arithmetic that could overflow. Loss
// scaling reads it once per step instead of once per gradient.
Tensor all_finite(const std::vector<Tensor>& tensors);

}  // namespace strata
