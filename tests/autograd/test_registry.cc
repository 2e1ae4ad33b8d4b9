// Every op has a CPU kernel (views and custom gradients need none) and a gradient or an
// explicit "not differentiable" mark.
#include <strata/autograd/autograd.h>
#include <strata/core/dispatch.h>
#include "tests/autograd/autograd_test_util.h"

using namespace strata;
using namespace strata::autograd;

TEST_CASE("registry: every op has a CPU kernel and a gradient or a not-differentiable mark", "[registry]") {
  int with_gradient = 0, not_differentiable = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    INFO("op " << i << " (" << op_name(op) << ")");
    if (!is_view_op(op) && op != OpId::CustomGradient) {
      CHECK(find_kernel(op, DeviceType::CPU) != nullptr);
    }
    const GradientDef* def = find_gradient(op);
    CHECK(def != nullptr);
    if (def == nullptr) continue;
    if (def->differentiable) {
      CHECK(def->vjp != nullptr);
      ++with_gradient;
    } else {
      ++not_differentiable;
    }
  }
  // The float-valued ops are differentiable except sign/floor/stop_gradient;
  // comparisons, logical ops, arg-reductions and one_hot are marks.
  CHECK(with_gradient >= 50);
  CHECK(not_differentiable >= 10);
}

TEST_CASE("registry: specific marks", "[registry]") {
  for (OpId op : {OpId::Equal, OpId::Less, OpId::ArgMax, OpId::ArgMin, OpId::OneHot,
                  OpId::StopGradient, OpId::Sign, OpId::Floor, OpId::IsFinite, OpId::LogicalAnd}) {
    INFO(op_name(op));
    REQUIRE(find_gradient(op) != nullptr);
    CHECK_FALSE(find_gradient(op)->differentiable);
  }
  for (OpId op : {OpId::Add, OpId::MatMul, OpId::Conv2D, OpId::Conv2DBackpropInput,
                  OpId::Conv2DBackpropFilter, OpId::AvgPool2DGrad, OpId::MaxPool2DGrad, OpId::CustomGradient,
                  OpId::Reshape, OpId::Slice, OpId::Gather, OpId::ScatterAdd, OpId::Cast}) {
    INFO(op_name(op));
    REQUIRE(find_gradient(op) != nullptr);
    CHECK(find_gradient(op)->differentiable);
  }
}

TEST_CASE("registry: op names round-trip", "[registry]") {
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    OpId back{};
    REQUIRE(op_from_name(op_name(op), &back));
    REQUIRE(back == op);
  }
  OpId unused{};
  REQUIRE_FALSE(op_from_name("no_such_op", &unused));
}

TEST_CASE("IdSet: insert, contains, growth and clear", "[registry]") {
  IdSet set;
  REQUIRE(set.empty());
  REQUIRE_FALSE(set.contains(1));
  std::vector<uint64_t> ids;
  uint64_t v = 12345;
  for (int i = 0; i < 5000; ++i) {
    v = v * 6364136223846793005ull + 1442695040888963407ull;  // scattered ids
    ids.push_back((v >> 8) | 1);
    ids.push_back(uint64_t(i) * 64 + 1);  // and strided ones (stride = a power of two)
  }
  size_t fresh = 0;
  for (uint64_t id : ids) fresh += set.insert(id) ? 1 : 0;
  REQUIRE(set.size() == fresh);
  for (uint64_t id : ids) REQUIRE(set.contains(id));
  REQUIRE_FALSE(set.insert(ids[0]));
  REQUIRE_FALSE(set.contains(2));
  REQUIRE_FALSE(set.contains(64 * 5000 + 1));
  REQUIRE_FALSE(set.insert(0));  // 0 is never a tensor id
  set.clear();
  REQUIRE(set.empty());
  REQUIRE_FALSE(set.contains(ids[5]));
  REQUIRE(set.insert(ids[5]));
  REQUIRE(set.contains(ids[5]));
}
