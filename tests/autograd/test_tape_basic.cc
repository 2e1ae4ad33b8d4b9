#include "autograd/autograd.h"
#include "tests/test_util.h"

using namespace strata;
using namespace strata::autograd;

TEST_CASE("tape: gradient of x^2 + 3x") {
  Tensor x = tensor({1, 2, 3});
  GradientTape tape;
  tape.watch(x);
  Tensor y = sum(x * x + x * 3.0);
  Tensor g = tape.gradient(y, x);
  REQUIRE_ALLCLOSE(g, tensor({5, 7, 9}));
}
