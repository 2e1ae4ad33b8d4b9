// Variable: in-place updates, shape checks, creator scopes.
#include <strata/autograd/autograd.h>
#include "tests/autograd/autograd_test_util.h"

using namespace strata;
using namespace strata::autograd;
using Catch::Matchers::Contains;

TEST_CASE("variable: assign, assign_add, assign_sub update in place", "[variable]") {
  Tensor init = tensor({1, 2, 3});
  Variable v(init, strata::testing::var_options("v"));
  REQUIRE(v.defined());
  REQUIRE(v.name() == "v");
  REQUIRE(v.trainable());
  REQUIRE(v.shape() == Shape{3});
  REQUIRE(v.dtype() == kFloat32);
  const uint64_t id = v.value().id();
  REQUIRE_FALSE(v.value().shares_storage(init));  // owns a private copy
  v.assign(tensor({4, 5, 6}));
  REQUIRE_CLOSE(v.value(), tensor({4, 5, 6}));
  v.assign_add(tensor({1, 1, 1}));
  REQUIRE_CLOSE(v.value(), tensor({5, 6, 7}));
  v.assign_sub(tensor({0.5f, 0.5f, 0.5f}));
  REQUIRE_CLOSE(v.value(), tensor({4.5f, 5.5f, 6.5f}));
  v.assign_add(full({}, 1.0));  // a scalar broadcasts
  REQUIRE_CLOSE(v.value(), tensor({5.5f, 6.5f, 7.5f}));
  REQUIRE(v.value().id() == id);  // same tensor: tapes and optimizers keep seeing it
  REQUIRE_CLOSE(init, tensor({1, 2, 3}));
  // Copies of the handle alias.
  Variable alias = v;
  alias.assign(tensor({0, 0, 0}));
  REQUIRE_CLOSE(v.value(), tensor({0, 0, 0}));
  REQUIRE(alias == v);
}

TEST_CASE("variable: assign with another dtype is an error, nothing converts silently", "[variable]") {
  Variable v(tensor({1, 2, 3}), strata::testing::var_options("bias"));
  REQUIRE_THROWS_WITH(v.assign(tensor({4, 5, 6}).cast(kFloat64)),
                      Contains("bias") && Contains("float64") && Contains("float32"));
  REQUIRE_THROWS_AS(v.assign(tensor({4, 5, 6}).cast(kInt32)), Error);
  REQUIRE_CLOSE(v.value(), tensor({1, 2, 3}));  // unchanged
  Variable counter(zeros({}, kInt64), strata::testing::var_options("counter"));
  REQUIRE_THROWS_AS(counter.assign(full({}, 2.5)), Error);  // would truncate to 2
  counter.assign(full({}, 2.0, kInt64));
  REQUIRE(counter.value().item<int64_t>() == 2);
}

TEST_CASE("variable: assign with a mismatched shape is an error naming the variable", "[variable]") {
  Variable v(tensor({{1, 2}, {3, 4}}), strata::testing::var_options("kernel"));
  REQUIRE_THROWS_AS(v.assign(tensor({1, 2, 3})), Error);
  REQUIRE_THROWS_WITH(v.assign(tensor({1, 2, 3})),
                      Contains("kernel") && Contains("[3]") && Contains("[2,2]"));
  REQUIRE_THROWS_WITH(v.assign(Tensor()), Contains("undefined"));
  REQUIRE_THROWS(v.assign_add(tensor({1, 2, 3})));
  REQUIRE_CLOSE(v.value(), tensor({{1, 2}, {3, 4}}));  // unchanged
  Variable undefined;
  REQUIRE_FALSE(undefined.defined());
  REQUIRE_THROWS_WITH(undefined.value(), Contains("undefined variable"));
}

TEST_CASE("variable: updates under a tape are not recorded", "[variable]") {
  Variable v(tensor({1, 2}), strata::testing::var_options("v"));
  GradientTape tape;
  Tensor y = sum(v.read() * 3.0);
  const size_t n = tape.num_recorded_ops();
  v.assign_add(tensor({1, 1}));
  v.assign_sub(tensor({1, 1}));
  REQUIRE(tape.num_recorded_ops() == n);
  REQUIRE_CLOSE(tape.gradient(y, std::vector<Variable>{v})[0], tensor({3, 3}));
}

namespace {
class TaggedImpl : public LocalVariableImpl {
 public:
  TaggedImpl(const Tensor& initial, VariableOptions options, int tag)
      : LocalVariableImpl(initial, std::move(options)), tag_(tag) {}
  std::string kind() const override { return "Tagged" + std::to_string(tag_); }

 private:
  int tag_;
};
}  // namespace

TEST_CASE("variable: the innermost creator scope creates variables", "[variable]") {
  int calls_outer = 0, calls_inner = 0;
  Variable plain(tensor({1}));
  REQUIRE(plain.impl().kind() == "Variable");
  {
    VariableCreatorScope outer([&](const Tensor& init, const VariableOptions& o) {
      ++calls_outer;
      return std::make_shared<TaggedImpl>(init, o, 1);
    });
    Variable a(tensor({1}), strata::testing::var_options("a"));
    REQUIRE(a.impl().kind() == "Tagged1");
    REQUIRE(a.name() == "a");
    {
      VariableCreatorScope inner([&](const Tensor& init, const VariableOptions& o) {
        ++calls_inner;
        return std::make_shared<TaggedImpl>(init, o, 2);
      });
      Variable b(tensor({2}));
      REQUIRE(b.impl().kind() == "Tagged2");
    }
    Variable c(tensor({3}));
    REQUIRE(c.impl().kind() == "Tagged1");
  }
  Variable d(tensor({4}));
  REQUIRE(d.impl().kind() == "Variable");
  REQUIRE(calls_outer == 2);
  REQUIRE(calls_inner == 1);
}

TEST_CASE("variable: options and make_like", "[variable]") {
  VariableOptions o;
  o.name = "m";
  o.trainable = false;
  o.synchronization = VariableSynchronization::OnRead;
  o.aggregation = VariableAggregation::Mean;
  Variable v(tensor({1, 2}), o);
  REQUIRE_FALSE(v.trainable());
  REQUIRE(v.synchronization() == VariableSynchronization::OnRead);
  REQUIRE(v.aggregation() == VariableAggregation::Mean);
  REQUIRE(std::string(synchronization_name(v.synchronization())) == "ON_READ");
  REQUIRE(std::string(aggregation_name(v.aggregation())) == "MEAN");
  auto slot = v.impl().make_like(zeros({2}), strata::testing::var_options("m/slot"));
  Variable s(slot);
  REQUIRE(s.name() == "m/slot");
  REQUIRE(s.device() == v.device());
  REQUIRE_CLOSE(s.value(), zeros({2}));
  REQUIRE(s.unique_id() != v.unique_id());
}
