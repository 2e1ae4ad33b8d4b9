#include <iostream>
#include "tests/test_util.h"
#include "core/random.h"
#include "train/nn/dropout.h"
using namespace strata;
TEST_CASE("zzdbg") {
  nn::Dropout d1(0.25, 7);
  Tensor x = full({10}, 2.0, kFloat64);
  Tensor y = d1(x);
  std::cout << y << "\n";
  Tensor y2 = d1(x);
  std::cout << y << "\n" << y2 << "\n";
}
