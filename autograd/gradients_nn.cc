// Gradients of matmul, the fused neural-network ops, the image ops and custom gradients.
#include <strata/autograd/custom_gradient.h>
#include <strata/autograd/gradient_registry.h>
#include <strata/core/ops.h>

namespace strata::autograd {

namespace {

using Grads = std::vector<Tensor>;

Grads matmul_vjp(const GradContext& c, const Tensor& g) {
  // C = A'B' with A' = ta ? A^T : A (last two axes); dA' = g B'^T, dB' = A'^T g.
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  const bool ta = c.attrs.transpose_a, tb = c.attrs.transpose_b;
  Tensor da, db;
  if (c.wants(0)) da = unbroadcast(ta ? matmul(b, g, tb, true) : matmul(g, b, false, !tb), c.input_meta[0].shape);
  if (c.wants(1)) db = unbroadcast(tb ? matmul(g, a, true, ta) : matmul(a, g, !ta, false), c.input_meta[1].shape);
  return {da, db};
}

Grads softmax_vjp(const GradContext& c, const Tensor& g) {
  const Tensor& y = c.output;
  const int64_t axis = c.attrs.axis;
  if (c.op == OpId::Softmax) return {y * (g - sum(g * y, std::vector<int64_t>{axis}, true))};
  return {g - exp(y) * sum(g, std::vector<int64_t>{axis}, true)};
}

Grads xent_vjp(const GradContext& c, const Tensor& g) {
  const Tensor& logits = c.inputs[0];
  const Tensor& labels = c.inputs[1];
  Tensor p = softmax(logits, -1);
  Tensor onehot = one_hot(labels, logits.dim(1), logits.dtype());
  return {(p - onehot) * expand_dims(g, 1), Tensor()};
}

Grads layer_norm_vjp(const GradContext& c, const Tensor& g) {
  const Tensor& x = c.inputs[0];
  const Tensor& gamma = c.inputs[1];
  const std::vector<int64_t> last{-1};
  Tensor mu = mean(x, last, true);
  Tensor xc = x - mu;
  Tensor var = mean(square(xc), last, true);
  Tensor rstd = rsqrt(var + c.attrs.get<LayerNormAttrs>(OpId::LayerNorm).epsilon);
  Tensor xhat = xc * rstd;
  std::vector<int64_t> lead;
  for (int64_t i = 0; i + 1 < x.ndim(); ++i) lead.push_back(i);
  Tensor dgamma = lead.empty() ? g * xhat : sum(g * xhat, lead);
  Tensor dbeta = lead.empty() ? g : sum(g, lead);
  Tensor dxhat = g * gamma;
  Tensor dx = rstd * (dxhat - mean(dxhat, last, true) - xhat * mean(dxhat * xhat, last, true));
  return {dx, dgamma, dbeta};
}

Grads conv_vjp(const GradContext& c, const Tensor& g) {
  const auto& a = c.attrs;
  switch (c.op) {
    case OpId::Conv2D: {
      const Tensor& x = c.inputs[0];
      const Tensor& w = c.inputs[1];
      // The first layer's input (the data batch) needs no gradient: skip that convolution.
      return {c.wants(0) ? conv2d_backprop_input(x.shape(), w, g, a.strides, a.padding) : Tensor(),
              c.wants(1) ? conv2d_backprop_filter(x, w.shape(), g, a.strides, a.padding) : Tensor()};
    }
    case OpId::Conv2DBackpropInput: {  // inputs (w, dy) -> dx, linear in each
      const Tensor& w = c.inputs[0];
      const Tensor& dy = c.inputs[1];
      return {conv2d_backprop_filter(g, w.shape(), dy, a.strides, a.padding),
              conv2d(g, w, a.strides, a.padding)};
    }
    case OpId::Conv2DBackpropFilter: {  // inputs (x, dy) -> dw
      const Tensor& x = c.inputs[0];
      const Tensor& dy = c.inputs[1];
      return {conv2d_backprop_input(x.shape(), g, dy, a.strides, a.padding),
              conv2d(x, g, a.strides, a.padding)};
    }
    case OpId::MaxPool2D:
      return {max_pool2d_grad(c.inputs[0], g, a.window, a.strides, a.padding)};
    case OpId::AvgPool2D:
      return {avg_pool2d_grad(c.input_meta[0].shape, g, a.window, a.strides, a.padding)};
    case OpId::AvgPool2DGrad:  // linear in dy: its adjoint is the pooling itself
      return {avg_pool2d(g, a.window, a.strides, a.padding)};
    default: break;
  }
  fail(op_name(c.op), ": no gradient (internal error)");
}

// max_pool2d_grad(x, dy) scatters dy to each window's arg-max; it is linear in dy, so its
// gradient w.r.t. dy gathers the upstream gradient g at those arg-maxes (TensorFlow's
// MaxPoolGradGrad), and w.r.t. x it is zero almost everywhere. Windows are read as patches
// by a convolution with a one-hot filter bank (exact: one product by 1 per output), so the
// gather is built from differentiable ops and higher derivatives keep working.
Grads max_pool2d_grad_vjp(const GradContext& c, const Tensor& g) {
  const auto& a = c.attrs;
  const Tensor& x = c.inputs[0];
  const int64_t kh = a.window[0], kw = a.window[1], ch = x.dim(3), k = kh * kw;
  std::vector<double> bank(size_t(k * ch * k * ch), 0.0);
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t ci = 0; ci < ch; ++ci) bank[size_t((i * ch + ci) * k * ch + i * ch + ci)] = 1.0;
  }
  const Tensor filter = Tensor::from_vector(bank, {kh, kw, ch, k * ch}, x.dtype(), x.device());
  auto patches = [&](const Tensor& t) {  // [N,Oh,Ow,k,C]: window element i of channel c
    Tensor p = conv2d(t, filter, a.strides, a.padding);
    return reshape(p, {p.dim(0), p.dim(1), p.dim(2), k, ch});
  };
  Tensor y = expand_dims(max_pool2d(x, a.window, a.strides, a.padding), 3);
  Tensor valid = greater(patches(ones_like(x)), scalar_like(x, 0.5));  // not SAME padding
  Tensor hit = cast(logical_and(equal(patches(x), y), valid), x.dtype());
  // The kernel sends the gradient to the first maximum in row-major window order.
  Tensor first = hit * cast(equal(cumsum(hit, 3, /*exclusive=*/true), scalar_like(x, 0.0)), x.dtype());
  return {Tensor(), sum(first * patches(g), std::vector<int64_t>{3})};
}

Grads custom_vjp(const GradContext& c, const Tensor& g) {
  const auto& fn = *static_cast<const CustomVjp*>(c.attrs.get<CustomGradientAttrs>(OpId::CustomGradient).vjp.get());
  Grads grads = fn(g);
  STRATA_CHECK(grads.size() == c.input_meta.size(), "custom_gradient: the gradient function returned ",
               grads.size(), " tensors for ", c.input_meta.size(), " inputs");
  for (size_t i = 0; i < grads.size(); ++i) {
    STRATA_CHECK(!grads[i].defined() || grads[i].shape() == c.input_meta[i].shape,
                 "custom_gradient: gradient ", i, " has shape ", shape_str(grads[i].shape()),
                 ", expected ", shape_str(c.input_meta[i].shape));
  }
  return grads;
}

}  // namespace

void register_nn_gradients() {
  register_gradient(OpId::MatMul, GradientDef{matmul_vjp, true});
  register_gradient(OpId::Softmax, GradientDef{softmax_vjp, false, true});
  register_gradient(OpId::LogSoftmax, GradientDef{softmax_vjp, false, true});
  register_gradient(OpId::SparseSoftmaxCrossEntropy, GradientDef{xent_vjp, true});
  register_gradient(OpId::LayerNorm, GradientDef{layer_norm_vjp, true});
  for (OpId op : {OpId::Conv2D, OpId::Conv2DBackpropInput, OpId::Conv2DBackpropFilter, OpId::MaxPool2D}) {
    register_gradient(op, GradientDef{conv_vjp, true});
  }
  register_gradient(OpId::AvgPool2D, GradientDef{conv_vjp, false});
  register_gradient(OpId::AvgPool2DGrad, GradientDef{conv_vjp, false});
  register_gradient(OpId::MaxPool2DGrad, GradientDef{max_pool2d_grad_vjp, true});
  register_gradient(OpId::CustomGradient, GradientDef{custom_vjp, false});
}

}  // namespace strata::autograd
