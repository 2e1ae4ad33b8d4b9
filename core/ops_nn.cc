// Front-ends of matmul, the fused neural-network ops and the NHWC image ops.
#include <strata/core/op_common.h>

namespace strata {

Tensor matmul(const Tensor& a0, const Tensor& b0, bool transpose_a, bool transpose_b) {
  const Device device = detail::op_device("matmul", {&a0, &b0});
  STRATA_CHECK(a0.ndim() >= 1 && b0.ndim() >= 1, "matmul: operands must have rank >= 1, got ",
               shape_str(a0.shape()), " @ ", shape_str(b0.shape()));
  STRATA_CHECK(a0.dtype() == b0.dtype(), "matmul: dtype mismatch: ", a0.dtype(), " @ ", b0.dtype());
  STRATA_CHECK(a0.dtype() != kBool, "matmul: bool operands are not supported");
  // NumPy: a 1-D left operand is a row vector, a 1-D right operand a column vector; the
  // added axis is removed from the result.
  const bool a_vec = a0.ndim() == 1, b_vec = b0.ndim() == 1;
  Tensor a = a_vec ? expand_dims(a0, 0) : a0;
  Tensor b = b_vec ? expand_dims(b0, 1) : b0;
  const int64_t ra = a.ndim(), rb = b.ndim();
  const int64_t m = transpose_a ? a.dim(-1) : a.dim(-2);
  const int64_t ka = transpose_a ? a.dim(-2) : a.dim(-1);
  const int64_t kb = transpose_b ? b.dim(-1) : b.dim(-2);
  const int64_t n = transpose_b ? b.dim(-2) : b.dim(-1);
  STRATA_CHECK(ka == kb, "matmul: inner dimensions differ: ", shape_str(a0.shape()),
               transpose_a ? "^T" : "", " @ ", shape_str(b0.shape()), transpose_b ? "^T" : "");
  Shape shape;
  if (ra == 2 && rb == 2) {
    shape = {m, n};  // one allocation: a tiny product's whole op costs ~1 us
  } else {
    Shape batch_a(a.shape().begin(), a.shape().begin() + (ra - 2));
    Shape batch_b(b.shape().begin(), b.shape().begin() + (rb - 2));
    try {
      shape = broadcast_shapes(batch_a, batch_b, "matmul");
    } catch (const Error&) {
      fail("matmul: batch dimensions cannot be broadcast together: ", shape_str(a0.shape()), " @ ",
           shape_str(b0.shape()));
    }
    shape.push_back(m);
    shape.push_back(n);
  }
  OpAttrs attrs;
  attrs.transpose_a = transpose_a;
  attrs.transpose_b = transpose_b;
  Tensor out = detail::compute1(OpId::MatMul, attrs, {a, b}, shape, a.dtype(), device);
  if (a_vec) out = squeeze(out, -2);
  if (b_vec) out = squeeze(out, -1);
  return out;
}

namespace {
Tensor softmax_like(OpId op, const Tensor& x, int64_t axis) {
  const char* name = op_name(op);
  detail::require_defined(name, x);
  detail::require_float(name, x);
  STRATA_CHECK(x.ndim() > 0, name, ": expected rank >= 1, got a scalar");
  OpAttrs attrs;
  attrs.axis = normalize_axis(axis, x.ndim(), name);
  return detail::compute1(op, attrs, {x}, x.shape(), x.dtype(), x.device());
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t axis) { return softmax_like(OpId::Softmax, x, axis); }
Tensor log_softmax(const Tensor& x, int64_t axis) { return softmax_like(OpId::LogSoftmax, x, axis); }

Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels) {
  const char* name = "sparse_softmax_cross_entropy";
  const Device device = detail::op_device(name, {&logits, &labels});
  detail::require_float(name, logits);
  STRATA_CHECK(logits.ndim() == 2, name, ": logits must be [N,K], got ", shape_str(logits.shape()));
  STRATA_CHECK(is_integral(labels.dtype()), name, ": labels must be int32 or int64, got ",
               labels.dtype());
  STRATA_CHECK(labels.ndim() == 1 && labels.dim(0) == logits.dim(0), name, ": labels shape ",
               shape_str(labels.shape()), " does not match logits ", shape_str(logits.shape()),
               " (expected [", logits.dim(0), "])");
  return detail::compute1(OpId::SparseSoftmaxCrossEntropy, OpAttrs{}, {logits, labels},
                          Shape{logits.dim(0)}, logits.dtype(), device);
}

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  const char* name = "layer_norm";
  const Device device = detail::op_device(name, {&x, &gamma, &beta});
  detail::require_float(name, x);
  STRATA_CHECK(x.ndim() >= 1, name, ": expected rank >= 1");
  const int64_t d = x.dim(-1);
  STRATA_CHECK(gamma.shape() == Shape{d} && beta.shape() == Shape{d}, name, ": gamma ",
               shape_str(gamma.shape()), " and beta ", shape_str(beta.shape()),
               " must both be [", d, "] for input ", shape_str(x.shape()));
  STRATA_CHECK(gamma.dtype() == x.dtype() && beta.dtype() == x.dtype(), name,
               ": dtype mismatch: x ", x.dtype(), ", gamma ", gamma.dtype(), ", beta ", beta.dtype());
  STRATA_CHECK(eps >= 0, name, ": eps must be >= 0, got ", eps);
  const OpAttrs attrs(LayerNormAttrs{eps});
  return detail::compute1(OpId::LayerNorm, attrs, {x, gamma, beta}, x.shape(), x.dtype(), device);
}

ConvAxis conv_output_axis(int64_t in, int64_t k, int64_t stride, Padding padding, const char* op) {
  STRATA_CHECK(stride > 0, op, ": strides must be positive, got ", stride);
  STRATA_CHECK(k > 0, op, ": window/filter extent must be positive, got ", k);
  ConvAxis a;
  if (padding == Padding::Valid) {
    STRATA_CHECK(in >= k, op, ": window ", k, " is larger than the input extent ", in,
                 " with VALID padding");
    a.out = (in - k) / stride + 1;
  } else {
    a.out = in == 0 ? 0 : (in - 1) / stride + 1;  // ceil(in / stride), without overflowing for huge strides
    const int64_t total = std::max<int64_t>((a.out - 1) * stride + k - in, 0);
    a.pad_before = total / 2;  // TensorFlow: the extra row/column goes bottom/right
  }
  return a;
}

namespace {

void check_nhwc(const char* op, const Tensor& x) {
  detail::require_defined(op, x);
  detail::require_float(op, x);
  STRATA_CHECK(x.ndim() == 4, op, ": expected an NHWC tensor of rank 4, got ", shape_str(x.shape()));
}

OpAttrs conv_attrs(std::array<int64_t, 2> strides, Padding padding) {
  OpAttrs attrs;
  attrs.strides = strides;
  attrs.padding = padding;
  return attrs;
}

Shape conv_out_shape(const char* op, const Shape& x, const Shape& w, std::array<int64_t, 2> s,
                     Padding p) {
  STRATA_CHECK(w.size() == 4, op, ": filter must be HWIO of rank 4, got ", shape_str(w));
  STRATA_CHECK(x[3] == w[2], op, ": input channels differ: input ", shape_str(x), " has ", x[3],
               ", filter ", shape_str(w), " expects ", w[2]);
  const auto h = conv_output_axis(x[1], w[0], s[0], p, op);
  const auto wd = conv_output_axis(x[2], w[1], s[1], p, op);
  return {x[0], h.out, wd.out, w[3]};
}

Shape pool_out_shape(const char* op, const Shape& x, std::array<int64_t, 2> k,
                     std::array<int64_t, 2> s, Padding p) {
  const auto h = conv_output_axis(x[1], k[0], s[0], p, op);
  const auto w = conv_output_axis(x[2], k[1], s[1], p, op);
  return {x[0], h.out, w.out, x[3]};
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, std::array<int64_t, 2> strides, Padding padding) {
  const Device device = detail::op_device("conv2d", {&x, &w});
  check_nhwc("conv2d", x);
  STRATA_CHECK(w.dtype() == x.dtype(), "conv2d: dtype mismatch: input ", x.dtype(), ", filter ",
               w.dtype());
  const Shape shape = conv_out_shape("conv2d", x.shape(), w.shape(), strides, padding);
  return detail::compute1(OpId::Conv2D, conv_attrs(strides, padding), {x, w}, shape, x.dtype(), device);
}

Tensor conv2d_backprop_input(const Shape& input_shape, const Tensor& w, const Tensor& dy,
                             std::array<int64_t, 2> strides, Padding padding) {
  const char* op = "conv2d_backprop_input";
  const Device device = detail::op_device(op, {&w, &dy});
  check_nhwc(op, dy);
  STRATA_CHECK(w.dtype() == dy.dtype(), op, ": dtype mismatch: filter ", w.dtype(), ", dy ", dy.dtype());
  STRATA_CHECK(input_shape.size() == 4, op, ": input shape must be rank 4");
  const Shape expect = conv_out_shape(op, input_shape, w.shape(), strides, padding);
  STRATA_CHECK(dy.shape() == expect, op, ": dy has shape ", shape_str(dy.shape()), ", expected ",
               shape_str(expect));
  OpAttrs attrs = conv_attrs(strides, padding);
  attrs.shape = input_shape;
  return detail::compute1(OpId::Conv2DBackpropInput, attrs, {w, dy}, input_shape, dy.dtype(), device);
}

Tensor conv2d_backprop_filter(const Tensor& x, const Shape& filter_shape, const Tensor& dy,
                              std::array<int64_t, 2> strides, Padding padding) {
  const char* op = "conv2d_backprop_filter";
  const Device device = detail::op_device(op, {&x, &dy});
  check_nhwc(op, x);
  check_nhwc(op, dy);
  STRATA_CHECK(x.dtype() == dy.dtype(), op, ": dtype mismatch: input ", x.dtype(), ", dy ", dy.dtype());
  const Shape expect = conv_out_shape(op, x.shape(), filter_shape, strides, padding);
  STRATA_CHECK(dy.shape() == expect, op, ": dy has shape ", shape_str(dy.shape()), ", expected ",
               shape_str(expect));
  OpAttrs attrs = conv_attrs(strides, padding);
  attrs.shape = filter_shape;
  return detail::compute1(OpId::Conv2DBackpropFilter, attrs, {x, dy}, filter_shape, x.dtype(), device);
}

Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> window, std::array<int64_t, 2> strides,
                  Padding padding) {
  check_nhwc("max_pool2d", x);
  OpAttrs attrs = conv_attrs(strides, padding);
  attrs.window = window;
  return detail::compute1(OpId::MaxPool2D, attrs, {x},
                          pool_out_shape("max_pool2d", x.shape(), window, strides, padding),
                          x.dtype(), x.device());
}

Tensor max_pool2d_grad(const Tensor& x, const Tensor& dy, std::array<int64_t, 2> window,
                       std::array<int64_t, 2> strides, Padding padding) {
  const char* op = "max_pool2d_grad";
  const Device device = detail::op_device(op, {&x, &dy});
  check_nhwc(op, x);
  STRATA_CHECK(x.dtype() == dy.dtype(), op, ": dtype mismatch: input ", x.dtype(), ", dy ", dy.dtype());
  STRATA_CHECK(dy.shape() == pool_out_shape(op, x.shape(), window, strides, padding), op,
               ": dy has shape ", shape_str(dy.shape()), " which does not match the pooled input");
  OpAttrs attrs = conv_attrs(strides, padding);
  attrs.window = window;
  return detail::compute1(OpId::MaxPool2DGrad, attrs, {x, dy}, x.shape(), x.dtype(), device);
}

Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> window, std::array<int64_t, 2> strides,
                  Padding padding) {
  check_nhwc("avg_pool2d", x);
  OpAttrs attrs = conv_attrs(strides, padding);
  attrs.window = window;
  return detail::compute1(OpId::AvgPool2D, attrs, {x},
                          pool_out_shape("avg_pool2d", x.shape(), window, strides, padding),
                          x.dtype(), x.device());
}

Tensor avg_pool2d_grad(const Shape& input_shape, const Tensor& dy, std::array<int64_t, 2> window,
                       std::array<int64_t, 2> strides, Padding padding) {
  const char* op = "avg_pool2d_grad";
  check_nhwc(op, dy);
  STRATA_CHECK(input_shape.size() == 4 &&
                   dy.shape() == pool_out_shape(op, input_shape, window, strides, padding),
               op, ": dy has shape ", shape_str(dy.shape()), " which does not match input ",
               shape_str(input_shape));
  OpAttrs attrs = conv_attrs(strides, padding);
  attrs.window = window;
  attrs.shape = input_shape;
  return detail::compute1(OpId::AvgPool2DGrad, attrs, {dy}, input_shape, dy.dtype(), dy.device());
}

void run_and_record(OpId op, const OpAttrs& attrs, std::span<const Tensor> in,
                    std::span<const Tensor> out) {
  detail::compute(op, attrs, in, out);
}

}  // namespace strata
