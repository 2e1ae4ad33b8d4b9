// Op-info entries of matmul, the fused neural-network ops, the NHWC image ops and
// custom_gradient.
#include <strata/autograd/custom_gradient.h>
#include "tests/op_info/entries.h"

namespace strata::testing {

using namespace entries;

namespace {

OpInfo matmul_entry() {
  OpInfo e;
  e.op = OpId::MatMul;
  e.dtypes = kNumericTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.build = [](SampleMaker& m) {
    auto mm = [](bool ta, bool tb) {
      return [ta, tb](const std::vector<Tensor>& x) { return matmul(x[0], x[1], ta, tb); };
    };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("[3,4] @ [4,5]", {m.input(0, {3, 4}), m.input(1, {4, 5})}, mm(false, false), {3, 5}, dt),
        make_sample("[3,4] @ [5,4]^T", {m.input(0, {3, 4}), m.input(1, {5, 4})}, mm(false, true), {3, 5}, dt),
        make_sample("[4,3]^T @ [4,5]", {m.input(0, {4, 3}), m.input(1, {4, 5})}, mm(true, false), {3, 5}, dt),
        make_sample("[4,3]^T @ [5,4]^T", {m.input(0, {4, 3}), m.input(1, {5, 4})}, mm(true, true), {3, 5},
                    dt),
        make_sample("batched [2,3,4] @ [2,4,5]", {m.input(0, {2, 3, 4}), m.input(1, {2, 4, 5})},
                    mm(false, false), {2, 3, 5}, dt),
        make_sample("broadcast batch [2,1,3,4] @ [3,4,2]", {m.input(0, {2, 1, 3, 4}), m.input(1, {3, 4, 2})},
                    mm(false, false), {2, 3, 3, 2}, dt),
        make_sample("[4] @ [4,5]", {m.input(0, {4}), m.input(1, {4, 5})}, mm(false, false), {5}, dt),
        make_sample("[3,4] @ [4]", {m.input(0, {3, 4}), m.input(1, {4})}, mm(false, false), {3}, dt),
        make_sample("[4] @ [4]", {m.input(0, {4}), m.input(1, {4})}, mm(false, false), {}, dt),
        make_sample(
            "transposed [4,3] @ step-2 slice of [4,10]", {m.input(0, {4, 3}), m.input(1, {4, 10})},
            [](const std::vector<Tensor>& x) {
              return matmul(transpose(x[0], {1, 0}), slice(x[1], 1, 0, 10, 2));
            },
            {3, 5}, dt),
    };
  };
  return e;
}

OpInfo softmax_like(OpId op, Tensor (*f)(const Tensor&, int64_t)) {
  OpInfo e;
  e.op = op;
  e.dtypes = kFloatTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.build = [f](SampleMaker& m) {
    auto along = [f](int64_t axis) {
      return [f, axis](const std::vector<Tensor>& x) { return f(x[0], axis); };
    };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("[3,4,5] axis 0", {m.input(0, {3, 4, 5})}, along(0), {3, 4, 5}, dt),
        make_sample("[3,4,5] axis 1", {m.input(0, {3, 4, 5})}, along(1), {3, 4, 5}, dt),
        make_sample("[3,4,5] axis -1", {m.input(0, {3, 4, 5})}, along(-1), {3, 4, 5}, dt),
        make_sample("[6]", {m.input(0, {6})}, along(0), {6}, dt),
        make_sample(
            "transposed [5,3] axis -1", {m.input(0, {5, 3})},
            [f](const std::vector<Tensor>& x) {
              return f(transpose(x[0], {1, 0}), -1);
            },
            {3, 5}, dt),
    };
  };
  return e;
}

OpInfo sparse_xent_entry() {
  OpInfo e;
  e.op = OpId::SparseSoftmaxCrossEntropy;
  e.dtypes = kFloatTypes;
  e.differentiable = true;
  e.domains = {Domain::Any, Domain::Indices};
  e.build = [](SampleMaker& m) {
    auto xent = [](const std::vector<Tensor>& x) { return sparse_softmax_cross_entropy(x[0], x[1]); };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("[4,5] with int64 labels", {m.input(0, {4, 5}), m.indices({4}, 5)}, xent, {4}, dt),
        make_sample("[3,2] with int32 labels", {m.input(0, {3, 2}), m.indices({3}, 2, kInt32)}, xent, {3},
                    dt),
        make_sample("[1,1]", {m.input(0, {1, 1}), m.indices({1}, 1)}, xent, {1}, dt),
        make_sample(
            "transposed [5,4]", {m.input(0, {5, 4}), m.indices({4}, 5)},
            [](const std::vector<Tensor>& x) {
              return sparse_softmax_cross_entropy(transpose(x[0], {1, 0}), x[1]);
            },
            {4}, dt),
    };
  };
  return e;
}

OpInfo layer_norm_entry() {
  OpInfo e;
  e.op = OpId::LayerNorm;
  e.dtypes = kFloatTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.build = [](SampleMaker& m) {
    auto ln = [](double eps) {
      return [eps](const std::vector<Tensor>& x) { return layer_norm(x[0], x[1], x[2], eps); };
    };
    auto three = [&](const Shape& s) {
      const int64_t d = s.empty() ? 1 : s.back();
      return std::vector<Tensor>{m.input(0, s), m.input(1, {d}), m.input(2, {d})};
    };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("[6]", three({6}), ln(1e-5), {6}, dt),
        make_sample("[3,5]", three({3, 5}), ln(1e-5), {3, 5}, dt),
        make_sample("[2,3,4]", three({2, 3, 4}), ln(1e-5), {2, 3, 4}, dt),
        make_sample("[3,4] eps 0.1", three({3, 4}), ln(0.1), {3, 4}, dt),
        make_sample(
            "transposed [4,3]", {m.input(0, {4, 3}), m.input(1, {4}), m.input(2, {4})},
            [](const std::vector<Tensor>& x) {
              return layer_norm(transpose(x[0], {1, 0}), x[1], x[2]);
            },
            {3, 4}, dt),
    };
  };
  return e;
}

// Convolution geometries: VALID and SAME, strides 1 and 2, an even filter (asymmetric SAME
// padding) and a 1x1 filter; output extents worked out by hand.
struct ConvCase {
  Shape x, w;
  std::array<int64_t, 2> strides;
  Padding padding;
  Shape y;
};

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {{1, 5, 5, 2}, {3, 3, 2, 3}, {1, 1}, Padding::Valid, {1, 3, 3, 3}},
      {{2, 4, 4, 2}, {3, 3, 2, 2}, {1, 1}, Padding::Same, {2, 4, 4, 2}},
      {{1, 6, 5, 2}, {3, 3, 2, 2}, {2, 2}, Padding::Same, {1, 3, 3, 2}},
      {{1, 4, 6, 1}, {2, 2, 1, 2}, {1, 2}, Padding::Same, {1, 4, 3, 2}},
      {{1, 5, 4, 3}, {1, 1, 3, 2}, {2, 1}, Padding::Valid, {1, 3, 4, 2}},
  };
  return cases;
}

std::string conv_str(const Shape& x, const Shape& w, std::array<int64_t, 2> s, Padding p) {
  return "x" + str(x) + " w" + str(w) + " strides " + std::to_string(s[0]) + "," + std::to_string(s[1]) +
         (p == Padding::Same ? " SAME" : " VALID");
}

OpInfo conv_entry(OpId op) {
  OpInfo e;
  e.op = op;
  e.dtypes = kFloatTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.build = [op](SampleMaker& m) {
    const DType dt = m.dtype();
    std::vector<OpSample> samples;
    for (const ConvCase& c : conv_cases()) {
      const std::string what = conv_str(c.x, c.w, c.strides, c.padding);
      const auto s = c.strides;
      const Padding p = c.padding;
      if (op == OpId::Conv2D) {
        samples.push_back(make_sample(
            what, {m.input(0, c.x), m.input(1, c.w)},
            [s, p](const std::vector<Tensor>& x) { return conv2d(x[0], x[1], s, p); }, c.y, dt));
      } else if (op == OpId::Conv2DBackpropInput) {
        const Shape in = c.x;
        samples.push_back(make_sample(
            what, {m.input(0, c.w), m.input(1, c.y)},
            [in, s, p](const std::vector<Tensor>& x) { return conv2d_backprop_input(in, x[0], x[1], s, p); },
            c.x, dt));
      } else {
        const Shape filter = c.w;
        samples.push_back(make_sample(
            what, {m.input(0, c.x), m.input(1, c.y)},
            [filter, s, p](const std::vector<Tensor>& x) {
              return conv2d_backprop_filter(x[0], filter, x[1], s, p);
            },
            c.w, dt));
      }
    }
    // Non-contiguous: an NCHW tensor permuted to NHWC; dy with H and W swapped.
    if (op == OpId::Conv2D) {
      samples.push_back(make_sample(
          "x permuted from NCHW [1,2,4,4], w [3,3,2,2] SAME",
          {m.input(0, {1, 2, 4, 4}), m.input(1, {3, 3, 2, 2})},
          [](const std::vector<Tensor>& x) {
            return conv2d(permute(x[0], {0, 2, 3, 1}), x[1], {1, 1}, Padding::Same);
          },
          {1, 4, 4, 2}, dt));
    } else if (op == OpId::Conv2DBackpropInput) {
      samples.push_back(make_sample(
          "dy [1,3,3,3] with H and W swapped", {m.input(0, {3, 3, 2, 3}), m.input(1, {1, 3, 3, 3})},
          [](const std::vector<Tensor>& x) {
            return conv2d_backprop_input({1, 5, 5, 2}, x[0], permute(x[1], {0, 2, 1, 3}), {1, 1},
                                         Padding::Valid);
          },
          {1, 5, 5, 2}, dt));
    } else {
      samples.push_back(make_sample(
          "x and dy with H and W swapped", {m.input(0, {1, 5, 5, 2}), m.input(1, {1, 3, 3, 3})},
          [](const std::vector<Tensor>& x) {
            return conv2d_backprop_filter(permute(x[0], {0, 2, 1, 3}), {3, 3, 2, 3},
                                          permute(x[1], {0, 2, 1, 3}), {1, 1}, Padding::Valid);
          },
          {3, 3, 2, 3}, dt));
    }
    return samples;
  };
  return e;
}

struct PoolCase {
  Shape x;
  std::array<int64_t, 2> window, strides;
  Padding padding;
  Shape y;
};

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {{2, 4, 4, 2}, {2, 2}, {2, 2}, Padding::Valid, {2, 2, 2, 2}},
      {{1, 5, 5, 2}, {3, 3}, {1, 1}, Padding::Same, {1, 5, 5, 2}},
      {{1, 5, 6, 1}, {3, 3}, {2, 2}, Padding::Same, {1, 3, 3, 1}},
      {{1, 5, 6, 2}, {3, 2}, {2, 1}, Padding::Valid, {1, 2, 5, 2}},
  };
  return cases;
}

std::string pool_str(const PoolCase& c) {
  return "x" + str(c.x) + " window " + std::to_string(c.window[0]) + "," + std::to_string(c.window[1]) +
         " strides " + std::to_string(c.strides[0]) + "," + std::to_string(c.strides[1]) +
         (c.padding == Padding::Same ? " SAME" : " VALID");
}

// max_pool2d and its gradient need distinct inputs (a unique maximum per window).
OpInfo pool_entry(OpId op) {
  OpInfo e;
  e.op = op;
  e.dtypes = kFloatTypes;
  e.differentiable = true;
  const bool is_max = op == OpId::MaxPool2D || op == OpId::MaxPool2DGrad;
  e.domains = {is_max ? Domain::Grid : Domain::Any, Domain::Any};
  e.build = [op](SampleMaker& m) {
    const DType dt = m.dtype();
    std::vector<OpSample> samples;
    for (const PoolCase& c : pool_cases()) {
      const auto k = c.window, s = c.strides;
      const Padding p = c.padding;
      const Shape in = c.x;
      switch (op) {
        case OpId::MaxPool2D:
          samples.push_back(make_sample(
              pool_str(c), {m.input(0, c.x)},
              [k, s, p](const std::vector<Tensor>& x) { return max_pool2d(x[0], k, s, p); }, c.y, dt));
          break;
        case OpId::AvgPool2D:
          samples.push_back(make_sample(
              pool_str(c), {m.input(0, c.x)},
              [k, s, p](const std::vector<Tensor>& x) { return avg_pool2d(x[0], k, s, p); }, c.y, dt));
          break;
        case OpId::MaxPool2DGrad:
          samples.push_back(make_sample(
              pool_str(c), {m.input(0, c.x), m.input(1, c.y)},
              [k, s, p](const std::vector<Tensor>& x) { return max_pool2d_grad(x[0], x[1], k, s, p); }, c.x,
              dt));
          break;
        default:  // AvgPool2DGrad
          samples.push_back(make_sample(
              pool_str(c), {m.input(0, c.y)},
              [in, k, s, p](const std::vector<Tensor>& x) { return avg_pool2d_grad(in, x[0], k, s, p); }, c.x,
              dt));
          break;
      }
    }
    // Non-contiguous: an NCHW tensor permuted to NHWC (and dy with H and W swapped).
    const std::array<int64_t, 2> two{2, 2};
    switch (op) {
      case OpId::MaxPool2D:
      case OpId::AvgPool2D:
        samples.push_back(make_sample(
            "x permuted from NCHW [1,2,4,4], window 2,2 strides 2,2 VALID", {m.input(0, {1, 2, 4, 4})},
            [op, two](const std::vector<Tensor>& x) {
              const Tensor nhwc = permute(x[0], {0, 2, 3, 1});
              return op == OpId::MaxPool2D ? max_pool2d(nhwc, two, two, Padding::Valid)
                                           : avg_pool2d(nhwc, two, two, Padding::Valid);
            },
            {1, 2, 2, 2}, dt));
        break;
      case OpId::MaxPool2DGrad:
        samples.push_back(make_sample(
            "x permuted from NCHW [1,2,4,4] and dy with H and W swapped",
            {m.input(0, {1, 2, 4, 4}), m.input(1, {1, 2, 2, 2})},
            [two](const std::vector<Tensor>& x) {
              return max_pool2d_grad(permute(x[0], {0, 2, 3, 1}), permute(x[1], {0, 2, 1, 3}), two, two,
                                     Padding::Valid);
            },
            {1, 4, 4, 2}, dt));
        break;
      default:
        samples.push_back(make_sample(
            "dy with H and W swapped", {m.input(0, {1, 2, 2, 2})},
            [two](const std::vector<Tensor>& x) {
              return avg_pool2d_grad({1, 4, 4, 2}, permute(x[0], {0, 2, 1, 3}), two, two, Padding::Valid);
            },
            {1, 4, 4, 2}, dt));
        break;
    }
    return samples;
  };
  return e;
}

// A user-defined gradient: gradcheck confirms the tape uses the given VJP.
OpInfo custom_gradient_entry() {
  OpInfo e;
  e.op = OpId::CustomGradient;
  e.dtypes = kFloatTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.recorded = false;  // its forward pauses recording, which removes any other recorder
  e.build = [](SampleMaker& m) {
    // softplus with the VJP g * sigmoid(x).
    auto softplus_fn = [](const std::vector<Tensor>& x) {
      return autograd::custom_gradient({x[0]}, [](const std::vector<Tensor>& xs) {
        const Tensor in = xs[0];
        Tensor out = log(exp(in) + 1.0);
        return autograd::CustomResult{out,
                                      [in](const Tensor& g) { return std::vector<Tensor>{g * sigmoid(in)}; }};
      });
    };
    // a * exp(b) with b broadcast along axis 0; the VJP sums b's gradient over that axis.
    auto scaled_exp_fn = [](const std::vector<Tensor>& x) {
      return autograd::custom_gradient({x[0], x[1]}, [](const std::vector<Tensor>& xs) {
        const Tensor a = xs[0], eb = exp(xs[1]);
        return autograd::CustomResult{
            a * eb, [a, eb](const Tensor& g) {
              return std::vector<Tensor>{g * eb, sum(g * a * eb, std::vector<int64_t>{0})};
            }};
      });
    };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("softplus [3,4]", {m.input(0, {3, 4})}, softplus_fn, {3, 4}, dt),
        make_sample("softplus rank 0", {m.input(0, {})}, softplus_fn, {}, dt),
        make_sample(
            "softplus of transposed [4,3]", {m.input(0, {4, 3})},
            [softplus_fn](const std::vector<Tensor>& x) {
              return softplus_fn({transpose(x[0], {1, 0})});
            },
            {3, 4}, dt),
        make_sample("[2,3] times exp([3])", {m.input(0, {2, 3}), m.input(1, {3})}, scaled_exp_fn, {2, 3}, dt),
    };
  };
  return e;
}

}  // namespace

void add_nn_entries(std::vector<OpInfo>& t) {
  t.push_back(matmul_entry());
  t.push_back(softmax_like(OpId::Softmax, &softmax));
  t.push_back(softmax_like(OpId::LogSoftmax, &log_softmax));
  t.push_back(sparse_xent_entry());
  t.push_back(layer_norm_entry());
  for (OpId op : {OpId::Conv2D, OpId::Conv2DBackpropInput, OpId::Conv2DBackpropFilter})
    t.push_back(conv_entry(op));
  for (OpId op : {OpId::MaxPool2D, OpId::MaxPool2DGrad, OpId::AvgPool2D, OpId::AvgPool2DGrad}) {
    t.push_back(pool_entry(op));
  }
  t.push_back(custom_gradient_entry());
}

}  // namespace strata::testing
