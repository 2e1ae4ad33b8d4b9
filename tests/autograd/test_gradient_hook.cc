// GradientReadyHook: the tape reports each watched variable's gradient once it is final,
// in backward order, and costs nothing without a hook.
#include <strata/autograd/autograd.h>
#include <strata/autograd/gradient_hook.h>
#include <strata/core/ops.h>
#include "tests/autograd/autograd_test_util.h"

using namespace strata;
using namespace strata::autograd;

namespace {

// Records what the tape reports, and which gradient ops had already run when it did.
struct RecordingHook final : GradientReadyHook {
  std::vector<std::string> events;
  std::vector<Tensor> gradients;
  void gradient_ready(const Variable& v, const Tensor& g) override {
    events.push_back(v.name());
    gradients.push_back(g);
  }
  void backward_done() override { events.push_back("done"); }
};

}  // namespace

TEST_CASE("gradient hook: variables are reported in backward order with their final gradient", "[tape][hook]") {
  Variable w1(tensor({{1, 2}, {3, 4}}), strata::testing::var_options("w1"));
  Variable w2(reshape(tensor({0.5f, -1}), {2, 1}), strata::testing::var_options("w2"));
  Variable shared(tensor({2, 3}), strata::testing::var_options("shared"));
  Variable unused(tensor({1}), strata::testing::var_options("unused"));
  RecordingHook hook;
  GradientHookScope scope(&hook);
  GradientTape tape;
  Tensor x = tensor({{1, -1}});
  Tensor h = matmul(mul(x, shared.read()), w1.read());  // shared read first...
  Tensor y = mul(matmul(h, w2.read()), sum(shared.read()));  // ...and again later
  Tensor u = unused.read();                              // read, never reaches the loss
  (void)u;
  Tensor loss = sum(y);
  auto grads = tape.gradient(loss, std::vector<Variable>{w1, w2, shared, unused});
  // w2 is read only by the newest matmul, w1 by an older one; `shared` by the oldest op,
  // so its gradient (two contributions) is final last. `unused` has no gradient.
  REQUIRE(hook.events == std::vector<std::string>{"w2", "w1", "shared", "done"});
  REQUIRE_FALSE(grads[3].defined());
  // The very tensors gradient() returns: reported after every contribution was added.
  REQUIRE(hook.gradients[0].id() == grads[1].id());
  REQUIRE(hook.gradients[1].id() == grads[0].id());
  REQUIRE(hook.gradients[2].id() == grads[2].id());
}

TEST_CASE("gradient hook: a variable is reported before the older ops' gradients run", "[tape][hook]") {
  // The hook sees w_top while backward still has the bottom layer to do: it records the
  // number of ops the tape had processed by comparing with a custom op's VJP call.
  Variable w_bottom(tensor({{1, 0}, {0, 1}}), strata::testing::var_options("bottom"));
  Variable w_top(reshape(tensor({1, 1}), {2, 1}), strata::testing::var_options("top"));
  std::vector<std::string> order;
  struct OrderHook final : GradientReadyHook {
    std::vector<std::string>* order;
    void gradient_ready(const Variable& v, const Tensor&) override { order->push_back("ready " + v.name()); }
    void backward_done() override { order->push_back("done"); }
  } hook;
  hook.order = &order;
  GradientHookScope scope(&hook);
  GradientTape tape;
  // A custom-gradient identity between the layers logs when its VJP runs.
  Tensor below = matmul(tensor({{1, 2}}), w_bottom.read());
  Tensor h = custom_gradient({below}, [&](const std::vector<Tensor>& in) {
    CustomVjp vjp = [&](const Tensor& g) {
      order.push_back("bottom backward");
      return std::vector<Tensor>{g};
    };
    return CustomResult{in[0] * 1.0, vjp};
  });
  Tensor loss = sum(matmul(h, w_top.read()));
  tape.gradient(loss, std::vector<Variable>{w_bottom, w_top});
  REQUIRE(order == std::vector<std::string>{"ready top", "bottom backward", "ready bottom", "done"});
}

TEST_CASE("gradient hook: none installed, tensor sources and jacobian report nothing", "[tape][hook]") {
  Variable w(tensor({1, 2}), strata::testing::var_options("w"));
  RecordingHook hook;
  {
    GradientTape tape;  // no hook on this thread
    Tensor loss = sum(mul(w.read(), w.read()));
    REQUIRE_CLOSE(tape.gradient(loss, std::vector<Variable>{w})[0], tensor({2, 4}));
  }
  GradientHookScope scope(&hook);
  {
    GradientTape tape;
    Tensor x = tensor({3, 4});
    tape.watch(x);
    Tensor loss = sum(mul(x, x));
    tape.gradient(loss, x);  // a plain tensor: not a variable
  }
  {
    GradientTape tape;
    Tensor y = mul(w.read(), w.read());
    tape.jacobian(y, w.value());
  }
  REQUIRE(hook.events == std::vector<std::string>{"done"});
  {
    GradientHookScope none(nullptr);
    GradientTape tape;
    Tensor loss = sum(w.read());
    tape.gradient(loss, std::vector<Variable>{w});
  }
  REQUIRE(hook.events == std::vector<std::string>{"done"});
}
