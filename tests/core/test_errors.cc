// Misuse raises strata::Error whose message starts with the op's name and names the shapes,
// dtypes or devices involved — never a crash or an abort. The per-area files test their
// ops' messages in context; this file sweeps the op front-ends with a table and covers the
// device and registry paths.
#include <functional>

#include <strata/core/allocator.h>
#include <strata/core/dispatch.h>
#include <strata/core/op_id.h>
#include <strata/core/pinned_host_allocator.h>
#include "tests/core/core_test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

struct ErrorCase {
  const char* what;
  std::function<void()> fn;
  std::vector<std::string> parts;  // the message starts with parts[0] and contains the rest
};

Tensor f32(const Shape& s) { return zeros(s); }
Tensor i64(const Shape& s) { return zeros(s, kInt64); }
Tensor boolean(const Shape& s) { return zeros(s, kBool); }

// A tensor that claims to live on cuda:0 (host memory underneath), for exercising the
// device checks of a build without CUDA.
Tensor fake_cuda(const Shape& shape) {
  auto buf = std::make_shared<std::vector<float>>(size_t(numel_of(shape)), 0.0f);
  auto storage = std::make_shared<Storage>(buf->data(), buf->size() * 4, cuda(0),
                                           [buf](void*) mutable { buf.reset(); });
  return Tensor::view_of(storage, 0, shape, contiguous_strides(shape), kFloat32);
}

const std::vector<ErrorCase>& error_cases() {
  static const std::vector<ErrorCase> cases = {
      // unary
      {"float-only unary on int", [] { tanh(i64({2, 3})); }, {"tanh:", "expected a floating-point tensor", "int64", "[2,3]"}},
      {"numeric unary on bool", [] { abs(boolean({2})); }, {"abs:", "expected a numeric tensor, got bool"}},
      {"logical_not on float", [] { logical_not(f32({2})); }, {"logical_not:", "expected a bool tensor, got float32"}},
      {"gelu on int", [] { gelu(i64({1})); }, {"gelu:", "floating-point"}},
      {"stop_gradient on int", [] { stop_gradient(i64({1})); }, {"stop_gradient:", "floating-point"}},
      // binary
      {"broadcast", [] { add(f32({2, 3}), f32({4})); }, {"add:", "shapes [2,3] and [4] cannot be broadcast together"}},
      {"broadcast sub", [] { sub(f32({5, 1, 3}), f32({2, 2})); }, {"sub:", "[5,1,3]", "[2,2]"}},
      {"mixed floats", [] { mul(f32({2}), zeros({2}, kFloat64)); }, {"mul:", "cannot mix float dtypes float32 and float64"}},
      {"bool arithmetic", [] { sub(boolean({2}), boolean({2})); }, {"sub:", "expected numeric tensors, got bool and bool"}},
      {"int div", [] { div(i64({2}), i64({2})); }, {"div:", "expected floating-point tensors, got int64 and int64"}},
      {"logical on float", [] { logical_or(f32({1}), boolean({1})); }, {"logical_or:", "expected bool tensors, got float32 and bool"}},
      {"where cond", [] { where(f32({2}), f32({2}), f32({2})); }, {"where:", "condition must be bool, got float32"}},
      {"where shapes", [] { where(boolean({3}), f32({2}), f32({2})); }, {"where:", "[3]", "[2]", "cannot be broadcast"}},
      {"clip bounds", [] { clip(f32({1}), 1, 0); }, {"clip:", "lower bound 1 exceeds upper bound 0"}},
      // reductions
      {"reduce bool", [] { max(boolean({2})); }, {"max:", "cannot reduce a bool tensor"}},
      {"reduce axis", [] { sum(f32({2, 3}), std::vector<int64_t>{5}); }, {"sum:", "axis 5 is out of range for rank 2"}},
      {"reduce repeated", [] { prod(f32({2, 3}), std::vector<int64_t>{0, -2}); }, {"prod:", "repeated axis"}},
      {"reduce empty", [] { min(f32({3, 0}), std::vector<int64_t>{1}); }, {"min:", "empty axis 1 of shape [3,0]"}},
      {"mean int", [] { mean(i64({2})); }, {"mean:", "floating-point", "int64"}},
      {"argmax axis", [] { argmax(f32({2}), 1); }, {"argmax:", "axis 1 is out of range for rank 1"}},
      {"argmin empty", [] { argmin(f32({0}), 0); }, {"argmin:", "axis 0 of shape [0] is empty"}},
      {"cumsum axis", [] { cumsum(f32({2}), -2); }, {"cumsum:", "axis -2 is out of range for rank 1"}},
      // shape
      {"reshape count", [] { reshape(f32({2, 3}), {4, 2}); }, {"reshape:", "cannot reshape [2,3] (6 elements) to [4,2] (8 elements)"}},
      {"transpose perm", [] { permute(f32({2, 3}), {1}); }, {"transpose:", "permutation of length 1", "[2,3]"}},
      {"slice step", [] { slice(f32({4}), 0, 0, 4, -1); }, {"slice:", "step must be positive, got -1"}},
      {"broadcast_to", [] { broadcast_to(f32({2, 3}), {3, 3}); }, {"broadcast_to:", "cannot broadcast [2,3] to [3,3]"}},
      {"squeeze", [] { squeeze(f32({2, 3}), 1); }, {"squeeze:", "axis 1 of shape [2,3] has extent 3, expected 1"}},
      {"expand_dims", [] { expand_dims(f32({2}), -3); }, {"expand_dims:", "axis -3 is out of range for rank 2"}},
      {"flatten", [] { flatten(f32({2, 3}), 2); }, {"flatten:", "axis 2 is out of range"}},
      {"concat shapes", [] { concat({f32({2, 3}), f32({2, 4})}, 0); }, {"concat:", "shapes [2,3] and [2,4] differ outside axis 0"}},
      {"concat dtypes", [] { concat({f32({2}), i64({2})}, 0); }, {"concat:", "dtype mismatch", "float32", "int64"}},
      {"stack shapes", [] { stack({f32({2}), f32({3})}); }, {"stack:", "shape mismatch: input 0 is [2], input 1 is [3]"}},
      {"split sizes", [] { split(f32({5}), std::vector<int64_t>{2, 2}, 0); }, {"split:", "sizes add up to 4", "[5]"}},
      {"pad rank", [] { pad(f32({2, 2}), {{1, 1}}); }, {"pad:", "1 (before, after) pairs for a tensor of rank 2"}},
      {"gather dtype", [] { gather(f32({3}), f32({1}), 0); }, {"gather:", "indices must be int32 or int64, got float32"}},
      {"gather range", [] { gather(f32({3, 2}), Tensor::from_vector(std::vector<int64_t>{3}), 0); }, {"gather:", "index 3 is out of range for axis 0 of extent 3"}},
      {"scatter_add shape", [] { scatter_add(f32({2}), i64({3}), {4}); }, {"scatter_add:", "updates have shape [2], expected [3]"}},
      {"scatter_add bool", [] { scatter_add(boolean({3}), i64({3}), {4}); }, {"scatter_add:", "expected numeric updates, got bool"}},
      {"one_hot dtype", [] { one_hot(f32({2}), 3); }, {"one_hot:", "indices must be int32 or int64"}},
      {"embedding rank", [] { embedding(f32({3}), i64({2})); }, {"embedding:", "table must be rank 2 [V,D], got [3]"}},
      // linalg
      {"matmul inner", [] { matmul(f32({2, 3}), f32({4, 5})); }, {"matmul:", "inner dimensions differ: [2,3] @ [4,5]"}},
      {"matmul batched inner", [] { matmul(f32({2, 1, 3}), f32({3, 4, 1})); }, {"matmul:", "inner dimensions differ: [2,1,3] @ [3,4,1]"}},
      {"matmul batch broadcast", [] { matmul(f32({2, 2, 3}), f32({4, 3, 1})); }, {"matmul:", "batch dimensions cannot be broadcast together: [2,2,3] @ [4,3,1]"}},
      {"matmul rank", [] { matmul(f32({}), f32({3})); }, {"matmul:", "rank >= 1", "[] @ [3]"}},
      {"matmul dtype", [] { matmul(f32({2, 2}), i64({2, 2})); }, {"matmul:", "dtype mismatch: float32 @ int64"}},
      // nn
      {"softmax scalar", [] { softmax(f32({})); }, {"softmax:", "expected rank >= 1, got a scalar"}},
      {"log_softmax axis", [] { log_softmax(f32({2, 3}), 2); }, {"log_softmax:", "axis 2 is out of range for rank 2"}},
      {"xent labels", [] { sparse_softmax_cross_entropy(f32({2, 3}), i64({3})); }, {"sparse_softmax_cross_entropy:", "labels shape [3] does not match logits [2,3]"}},
      {"xent label range", [] { sparse_softmax_cross_entropy(f32({1, 3}), full({1}, 3, kInt64)); }, {"sparse_softmax_cross_entropy:", "label 3 at position 0 is out of range [0, 3)"}},
      {"layer_norm gamma", [] { layer_norm(f32({2, 4}), f32({3}), f32({4})); }, {"layer_norm:", "gamma [3] and beta [4] must both be [4] for input [2,4]"}},
      // images
      {"conv2d channels", [] { conv2d(f32({1, 4, 4, 2}), f32({3, 3, 3, 1})); }, {"conv2d:", "input channels differ: input [1,4,4,2] has 2, filter [3,3,3,1] expects 3"}},
      {"conv2d rank", [] { conv2d(f32({4, 4, 2}), f32({3, 3, 2, 1})); }, {"conv2d:", "expected an NHWC tensor of rank 4, got [4,4,2]"}},
      {"conv2d valid", [] { conv2d(f32({1, 2, 4, 1}), f32({3, 3, 1, 1})); }, {"conv2d:", "window 3 is larger than the input extent 2 with VALID padding"}},
      {"conv2d_backprop_input", [] { conv2d_backprop_input({1, 4, 4}, f32({3, 3, 1, 1}), f32({1, 2, 2, 1}), {1, 1}, Padding::Valid); }, {"conv2d_backprop_input:", "input shape must be rank 4"}},
      {"max_pool2d stride", [] { max_pool2d(f32({1, 4, 4, 1}), {2, 2}, {0, 2}); }, {"max_pool2d:", "strides must be positive, got 0"}},
      {"avg_pool2d window", [] { avg_pool2d(f32({1, 4, 4, 1}), {5, 2}, {1, 1}); }, {"avg_pool2d:", "window 5 is larger than the input extent 4"}},
      // tensors, dtypes, devices
      {"from_vector", [] { Tensor::from_vector(std::vector<float>{1, 2}, {3}); }, {"from_vector:", "2 values do not fill shape [3] (3 elements)"}},
      {"empty negative", [] { Tensor::empty({-1}); }, {"empty:", "negative extent in shape [-1]"}},
      {"item", [] { f32({2}).item<float>(); }, {"item:", "expected a tensor with one element, got shape [2]"}},
      {"data dtype", [] { f32({2}).data<int64_t>(); }, {"Tensor::data:", "tensor has dtype float32, requested int64"}},
      {"dim", [] { f32({2}).dim(-2); }, {"Tensor::dim:", "axis -2 is out of range for rank 1"}},
      {"undefined", [] { Tensor().numel(); }, {"Tensor:", "use of an undefined tensor"}},
      {"dtype name", [] { dtype_from_name("float8"); }, {"dtype:", "unknown dtype name 'float8'"}},
      {"device name", [] { Device::parse("npu"); }, {"device:", "unknown device 'npu'"}},
      {"to cuda", [] { f32({2}).to(cuda(0)); }, {"Tensor::to:", "cannot copy from cpu:0 to cuda:0"}},
      {"zeros on cuda", [] { zeros({2}, kFloat32, cuda(0)); }, {"allocator:", "no allocator for device type cuda"}},
      {"cuda allocator", [] { Tensor::empty({2}, kFloat32, cuda(0)); }, {"allocator:", "no allocator for device type cuda"}},
      {"read cuda tensor", [] { fake_cuda({2}).to_vector<float>(); }, {"Tensor::to:", "cannot copy from cuda:0 to cpu:0"}},
      {"host pointer to cuda memory", [] { fake_cuda({2}).data<float>(); }, {"Tensor::data:", "cuda:0 tensor is not addressable from the host"}},
      {"random dtype", [] { random::normal({2}, 1, 0.0, 1.0, kInt32); }, {"random::normal:", "expected a floating dtype, got int32"}},
  };
  return cases;
}

}  // namespace

TEST_CASE("errors: every misuse raises strata::Error starting with the op's name", "[errors]") {
  for (const auto& c : error_cases()) {
    INFO(c.what);
    REQUIRE_THROWS_AS(c.fn(), Error);
    REQUIRE_THROWS_WITH(c.fn(), StartsWith(c.parts[0]));
    for (size_t i = 1; i < c.parts.size(); ++i) REQUIRE_THROWS_WITH(c.fn(), Contains(c.parts[i]));
  }
}

TEST_CASE("errors: strata::Error is a std::runtime_error carrying the message", "[errors]") {
  try {
    fail("op: ", 3, " things at ", shape_str({1, 2}));
    FAIL("fail() returned");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "op: 3 things at [1,2]");
  }
  CHECK_NOTHROW([] { STRATA_CHECK(1 + 1 == 2, "never"); }());
  REQUIRE_THROWS_WITH([] { STRATA_CHECK(false, "x: ", 1.5); }(), "x: 1.5");
}

TEST_CASE("errors: a missing kernel is reported with the op and the device", "[errors][dispatch]") {
  Tensor a = fake_cuda({2}), out = fake_cuda({2});
  const Tensor in[2] = {a, a};
  const Tensor o[1] = {out};
  REQUIRE_THROWS_WITH(run_and_record(OpId::Add, OpAttrs{}, in, o),
                      StartsWith("add: no kernel for device cuda:0"));
  // Mixing a (fake) cuda tensor with a CPU one is refused by the front-end.
  REQUIRE_THROWS_WITH(add(a, ones({2})), Contains("add: inputs are on different devices: cuda:0 and cpu:0"));
  REQUIRE_THROWS_WITH(matmul(ones({2, 2}), fake_cuda({2, 2})), Contains("matmul: inputs are on different devices"));
  REQUIRE_THROWS_WITH(concat({ones({2}), a}, 0), Contains("concat: inputs are on different devices"));
}

TEST_CASE("errors: pin_memory without the CUDA backend says so", "[errors]") {
  REQUIRE(pinned_host_allocator() == nullptr);  // core's tests link no backend
  REQUIRE_THROWS_WITH(ones({2}).pin_memory(),
                      StartsWith("Tensor::pin_memory: page-locked (pinned) host memory needs the CUDA backend"));
  CHECK_FALSE(ones({2}).is_pinned());
  CHECK_FALSE(Tensor().is_pinned());
}

TEST_CASE("errors: every op has a CPU kernel or is a view op", "[errors][dispatch]") {
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = OpId(i);
    if (op == OpId::CustomGradient) continue;  // carries a user VJP; no kernel by design
    INFO(op_name(op));
    CHECK((find_kernel(op, DeviceType::CPU) != nullptr || is_view_op(op)));
    OpId back;
    REQUIRE(op_from_name(op_name(op), &back));
    CHECK(back == op);
  }
  OpId unused;
  CHECK_FALSE(op_from_name("no_such_op", &unused));
}
