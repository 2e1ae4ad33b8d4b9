#include "tests/test_util.h"
TEST_CASE("smoke: add") {
  using namespace strata;
  Tensor a = tensor({1, 2, 3});
  Tensor b = tensor({10, 20, 30});
  REQUIRE_ALLCLOSE(a + b, tensor({11, 22, 33}));
}
