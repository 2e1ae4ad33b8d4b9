// Op-info entries of the elementwise family: unary ops, binary broadcasting ops, where, cast
// and copy.
#include "tests/op_info/entries.h"

namespace strata::testing {

using namespace entries;

namespace {

using Unary = std::function<Tensor(const Tensor&)>;
using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;

// One way of calling a unary op (gelu has two), and the label its samples carry.
struct UnaryCall {
  std::string label;
  Unary f;
};

// Every rank from 0 to 3, an empty tensor, and three non-contiguous operands: a transposed
// view, a step-2 slice and a broadcast (stride-0) view.
std::vector<OpSample> unary_samples(SampleMaker& m, const std::vector<UnaryCall>& calls, DType out) {
  std::vector<OpSample> samples;
  for (const UnaryCall& c : calls) {
    const Unary f = c.f;
    for (const Shape& s : std::vector<Shape>{{}, {5}, {3, 4}, {2, 3, 4}, {2, 0}}) {
      samples.push_back(make_sample(
          c.label + str(s), {m.input(0, s)}, [f](const std::vector<Tensor>& x) { return f(x[0]); }, s, out));
    }
    samples.push_back(make_sample(
        c.label + "transposed [4,3]", {m.input(0, {4, 3})},
        [f](const std::vector<Tensor>& x) {
          return f(transpose(x[0], {1, 0}));
        },
        {3, 4}, out));
    samples.push_back(make_sample(
        c.label + "step-2 slice of [3,8]", {m.input(0, {3, 8})},
        [f](const std::vector<Tensor>& x) { return f(slice(x[0], 1, 1, 8, 2)); }, {3, 4}, out));
    samples.push_back(make_sample(
        c.label + "[1,4] broadcast to [3,4]", {m.input(0, {1, 4})},
        [f](const std::vector<Tensor>& x) {
          return f(broadcast_to(x[0], {3, 4}));
        },
        {3, 4}, out));
  }
  return samples;
}

OpInfo unary(OpId op, Unary f, std::vector<DType> dtypes, Domain domain, bool differentiable,
             bool to_bool = false) {
  OpInfo e;
  e.op = op;
  e.dtypes = std::move(dtypes);
  e.differentiable = differentiable;
  e.domains = {domain};
  e.build = [f, to_bool](SampleMaker& m) { return unary_samples(m, {{"", f}}, to_bool ? kBool : m.dtype()); };
  return e;
}

// Shapes of a broadcasting binary op: equal, trailing, leading and two-sided broadcasts,
// rank 0 on either side, an empty result, and strided operands.
std::vector<OpSample> binary_samples(SampleMaker& m, const Binary& f, DType out) {
  struct Shapes {
    Shape a, b, out;
  };
  const std::vector<Shapes> shapes = {
      {{3, 4}, {3, 4}, {3, 4}},
      {{3, 4}, {4}, {3, 4}},
      {{4}, {3, 4}, {3, 4}},
      {{2, 1, 4}, {3, 1}, {2, 3, 4}},
      {{1, 3, 1}, {2, 1, 5}, {2, 3, 5}},
      {{}, {2, 3}, {2, 3}},
      {{2, 3}, {}, {2, 3}},
      {{}, {}, {}},
      {{2, 0}, {1}, {2, 0}},
  };
  std::vector<OpSample> samples;
  auto call = [f](const std::vector<Tensor>& x) { return f(x[0], x[1]); };
  for (const Shapes& s : shapes) {
    samples.push_back(
        make_sample(str(s.a) + " with " + str(s.b), {m.input(0, s.a), m.input(1, s.b)}, call, s.out, out));
  }
  samples.push_back(make_sample(
      "transposed [4,3] with a step-2 slice of [3,8]", {m.input(0, {4, 3}), m.input(1, {3, 8})},
      [f](const std::vector<Tensor>& x) {
        return f(transpose(x[0], {1, 0}), slice(x[1], 1, 0, 8, 2));
      },
      {3, 4}, out));
  return samples;
}

OpInfo binary(OpId op, Binary f, std::vector<DType> dtypes, std::vector<Domain> domains, bool differentiable,
              bool to_bool = false) {
  OpInfo e;
  e.op = op;
  e.dtypes = std::move(dtypes);
  e.differentiable = differentiable;
  e.domains = std::move(domains);
  e.build = [f, to_bool](SampleMaker& m) { return binary_samples(m, f, to_bool ? kBool : m.dtype()); };
  return e;
}

OpInfo gelu_entry() {
  OpInfo e = unary(
      OpId::Gelu, [](const Tensor& x) { return gelu(x); }, kFloatTypes, Domain::Any, true);
  e.build = [](SampleMaker& m) {
    return unary_samples(m,
                         {{"", [](const Tensor& x) { return gelu(x, false); }},
                          {"tanh approximation, ", [](const Tensor& x) { return gelu(x, true); }}},
                         m.dtype());
  };
  return e;
}

// Every other dtype as the target; float targets are gradchecked (a float16 or bfloat16
// target rounds away the finite-difference step).
OpInfo cast_entry() {
  OpInfo e;
  e.op = OpId::Cast;
  e.dtypes = kAllTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  // cast is linear: a large step is exact, and it stays far above float32 rounding.
  e.gradcheck = autograd::GradcheckOptions{1e-2, 1e-4, 1e-4};
  e.build = [](SampleMaker& m) {
    std::vector<OpSample> samples;
    auto other = [&](DType want) {
      return want == m.dtype() ? (want == kFloat64 ? kFloat32 : kFloat64) : want;
    };
    for (DType target : kAllTypes) {
      if (target == m.dtype()) continue;
      OpSample s = make_sample(
          std::string("[3,4] to ") + dtype_name(target), {m.input(0, {3, 4})},
          [target](const std::vector<Tensor>& x) { return cast(x[0], target); }, {3, 4}, target);
      s.gradcheck = target == kFloat32 || target == kFloat64;
      samples.push_back(std::move(s));
    }
    const DType to64 = other(kFloat64);
    samples.push_back(make_sample(
        std::string("rank 0 to ") + dtype_name(to64), {m.input(0, {})},
        [to64](const std::vector<Tensor>& x) { return cast(x[0], to64); }, {}, to64));
    samples.push_back(make_sample(
        std::string("transposed [4,3] to ") + dtype_name(to64), {m.input(0, {4, 3})},
        [to64](const std::vector<Tensor>& x) {
          return cast(transpose(x[0], {1, 0}), to64);
        },
        {3, 4}, to64));
    const DType to_int = other(kInt32);
    samples.push_back(make_sample(
        std::string("step-2 slice of [2,3,8] to ") + dtype_name(to_int), {m.input(0, {2, 3, 8})},
        [to_int](const std::vector<Tensor>& x) { return cast(slice(x[0], 2, 1, 8, 2), to_int); }, {2, 3, 4},
        to_int));
    return samples;
  };
  return e;
}

// Copies run for a non-contiguous operand (contiguous()) and for clone().
OpInfo copy_entry() {
  OpInfo e;
  e.op = OpId::Copy;
  e.dtypes = kAllTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.build = [](SampleMaker& m) {
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample(
            "contiguous() of transposed [4,3]", {m.input(0, {4, 3})},
            [](const std::vector<Tensor>& x) {
              return contiguous(transpose(x[0], {1, 0}));
            },
            {3, 4}, dt),
        make_sample(
            "contiguous() of a step-3 slice of [2,3,8]", {m.input(0, {2, 3, 8})},
            [](const std::vector<Tensor>& x) { return contiguous(slice(x[0], 2, 0, 8, 3)); }, {2, 3, 3}, dt),
        make_sample(
            "contiguous() of [1,4] broadcast to [3,4]", {m.input(0, {1, 4})},
            [](const std::vector<Tensor>& x) {
              return contiguous(broadcast_to(x[0], {3, 4}));
            },
            {3, 4}, dt),
        make_sample(
            "clone() of rank 0", {m.input(0, {})}, [](const std::vector<Tensor>& x) { return x[0].clone(); },
            {}, dt),
        make_sample(
            "clone() of [5]", {m.input(0, {5})}, [](const std::vector<Tensor>& x) { return x[0].clone(); },
            {5}, dt),
    };
  };
  return e;
}

// cond ? a : b with all three broadcasting, and strided branches.
OpInfo where_entry() {
  OpInfo e;
  e.op = OpId::Where;
  e.dtypes = kAllTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.build = [](SampleMaker& m) {
    struct Shapes {
      Shape cond, a, b, out;
    };
    const std::vector<Shapes> shapes = {
        {{3, 4}, {3, 4}, {3, 4}, {3, 4}},          {{3, 1}, {4}, {}, {3, 4}}, {{}, {2, 3}, {2, 3}, {2, 3}},
        {{2, 1, 4}, {3, 1}, {2, 3, 4}, {2, 3, 4}}, {{}, {}, {}, {}},
    };
    auto call = [](const std::vector<Tensor>& x) { return where(x[0], x[1], x[2]); };
    std::vector<OpSample> samples;
    for (const Shapes& s : shapes) {
      samples.push_back(make_sample(str(s.cond) + " ? " + str(s.a) + " : " + str(s.b),
                                    {m.input(0, s.cond, kBool), m.input(1, s.a), m.input(2, s.b)}, call,
                                    s.out, m.dtype()));
    }
    samples.push_back(make_sample(
        "[3,4] ? transposed [4,3] : step-2 slice of [6,4]",
        {m.input(0, {3, 4}, kBool), m.input(1, {4, 3}), m.input(2, {6, 4})},
        [](const std::vector<Tensor>& x) {
          return where(x[0], transpose(x[1], {1, 0}), slice(x[2], 0, 0, 6, 2));
        },
        {3, 4}, m.dtype()));
    return samples;
  };
  return e;
}

}  // namespace

void add_elementwise_entries(std::vector<OpInfo>& t) {
  // ---- unary ----
  t.push_back(unary(
      OpId::Neg, [](const Tensor& x) { return neg(x); }, kNumericTypes, Domain::Any, true));
  t.push_back(unary(
      OpId::Exp, [](const Tensor& x) { return exp(x); }, kFloatTypes, Domain::Any, true));
  t.push_back(unary(
      OpId::Log, [](const Tensor& x) { return log(x); }, kFloatTypes, Domain::Positive, true));
  t.push_back(unary(
      OpId::Sqrt, [](const Tensor& x) { return sqrt(x); }, kFloatTypes, Domain::Positive, true));
  t.push_back(unary(
      OpId::Rsqrt, [](const Tensor& x) { return rsqrt(x); }, kFloatTypes, Domain::Positive, true));
  // |x| and relu have a kink at 0.
  t.push_back(unary(
      OpId::Abs, [](const Tensor& x) { return abs(x); }, kNumericTypes, Domain::AwayFromZero, true));
  t.push_back(unary(
      OpId::Square, [](const Tensor& x) { return square(x); }, kNumericTypes, Domain::Any, true));
  t.push_back(unary(
      OpId::Sin, [](const Tensor& x) { return sin(x); }, kFloatTypes, Domain::Any, true));
  t.push_back(unary(
      OpId::Cos, [](const Tensor& x) { return cos(x); }, kFloatTypes, Domain::Any, true));
  t.push_back(unary(
      OpId::Tanh, [](const Tensor& x) { return tanh(x); }, kFloatTypes, Domain::Any, true));
  t.push_back(unary(
      OpId::Sigmoid, [](const Tensor& x) { return sigmoid(x); }, kFloatTypes, Domain::Any, true));
  t.push_back(unary(
      OpId::Relu, [](const Tensor& x) { return relu(x); }, kNumericTypes, Domain::AwayFromZero, true));
  t.push_back(unary(
      OpId::Softplus, [](const Tensor& x) { return softplus(x); }, kFloatTypes, Domain::Any, true));
  t.push_back(gelu_entry());
  t.push_back(unary(
      OpId::Erf, [](const Tensor& x) { return erf(x); }, kFloatTypes, Domain::Any, true));
  // Zeros included: sign(0) = 0.
  t.push_back(unary(
      OpId::Sign, [](const Tensor& x) { return sign(x); }, kNumericTypes, Domain::FewValues, false));
  t.push_back(unary(
      OpId::Reciprocal, [](const Tensor& x) { return reciprocal(x); }, kFloatTypes, Domain::AwayFromZero,
      true));
  t.push_back(unary(
      OpId::Floor, [](const Tensor& x) { return floor(x); }, kNumericTypes, Domain::Any, false));
  t.push_back(unary(
      OpId::IsFinite, [](const Tensor& x) { return is_finite(x); }, kAllTypes, Domain::WithNonFinite, false,
      /*to_bool=*/true));
  t.push_back(unary(
      OpId::LogicalNot, [](const Tensor& x) { return logical_not(x); }, {kBool}, Domain::Any, false, true));
  t.push_back(cast_entry());
  t.push_back(copy_entry());
  t.push_back(unary(
      OpId::StopGradient, [](const Tensor& x) { return stop_gradient(x); }, kFloatTypes, Domain::Any, false));

  // ---- binary, broadcasting ----
  t.push_back(binary(
      OpId::Add, [](const Tensor& a, const Tensor& b) { return add(a, b); }, kNumericTypes, {Domain::Any},
      true));
  t.push_back(binary(
      OpId::Sub, [](const Tensor& a, const Tensor& b) { return sub(a, b); }, kNumericTypes, {Domain::Any},
      true));
  t.push_back(binary(
      OpId::Mul, [](const Tensor& a, const Tensor& b) { return mul(a, b); }, kNumericTypes, {Domain::Any},
      true));
  t.push_back(binary(
      OpId::Div, [](const Tensor& a, const Tensor& b) { return div(a, b); }, kFloatTypes,
      {Domain::Any, Domain::AwayFromZero}, true));
  t.push_back(binary(
      OpId::Pow, [](const Tensor& a, const Tensor& b) { return pow(a, b); }, kFloatTypes,
      {Domain::Positive, Domain::Any}, true));
  // a on the grid, b off it: never tied, so the gradient is defined at every probe.
  t.push_back(binary(
      OpId::Maximum, [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, kNumericTypes,
      {Domain::Grid, Domain::OffGrid}, true));
  t.push_back(binary(
      OpId::Minimum, [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, kNumericTypes,
      {Domain::Grid, Domain::OffGrid}, true));
  // x away from 0, where relu's gradient is defined (gradient 0 in x, the select in g).
  t.push_back(binary(
      OpId::ReluGrad, [](const Tensor& x, const Tensor& g) { return relu_grad(x, g); }, kNumericTypes,
      {Domain::AwayFromZero, Domain::Any}, true));
  // Few distinct values, so that equal pairs occur.
  const std::vector<std::pair<OpId, Binary>> comparisons = {
      {OpId::Equal, [](const Tensor& a, const Tensor& b) { return equal(a, b); }},
      {OpId::NotEqual, [](const Tensor& a, const Tensor& b) { return not_equal(a, b); }},
      {OpId::Less, [](const Tensor& a, const Tensor& b) { return less(a, b); }},
      {OpId::LessEqual, [](const Tensor& a, const Tensor& b) { return less_equal(a, b); }},
      {OpId::Greater, [](const Tensor& a, const Tensor& b) { return greater(a, b); }},
      {OpId::GreaterEqual, [](const Tensor& a, const Tensor& b) { return greater_equal(a, b); }},
  };
  for (const auto& [op, f] : comparisons) {
    t.push_back(binary(op, f, kAllTypes, {Domain::FewValues}, false, /*to_bool=*/true));
  }
  t.push_back(binary(
      OpId::LogicalAnd, [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }, {kBool},
      {Domain::Any}, false, true));
  t.push_back(binary(
      OpId::LogicalOr, [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }, {kBool},
      {Domain::Any}, false, true));
  t.push_back(where_entry());
}

}  // namespace strata::testing
