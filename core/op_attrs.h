// OpAttrs: the non-tensor arguments of an op call, recorded with it on the tape and handed
// to kernels. One struct with named fields keeps dispatch uniform across op families;
// each op reads only the fields its front-end documents.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace strata {

enum class Padding : uint8_t { Valid, Same };

struct OpAttrs {
  std::vector<int64_t> axes;  // reductions (normalised, sorted); permute: the permutation
  bool keepdims = false;
  Shape shape;            // reshape/broadcast target; backprop-input shape
  int64_t axis = 0;       // slice, concat, gather, softmax, cumsum, argmax, one_hot
  int64_t start = 0;      // slice
  int64_t end = 0;        // slice
  int64_t step = 1;       // slice
  int64_t depth = 0;      // one_hot
  std::vector<int64_t> pads;  // pad: (before, after) per axis
  double scalar = 0.0;    // pad value, layer_norm eps
  bool flag = false;      // gelu: tanh approximation; cumsum: exclusive
  bool flag2 = false;     // cumsum: reverse
  bool transpose_a = false, transpose_b = false;  // matmul
  DType dtype = DType::Float32;  // cast target
  std::array<int64_t, 2> strides{1, 1};  // conv/pool
  std::array<int64_t, 2> window{1, 1};   // pool
  Padding padding = Padding::Valid;      // conv/pool
  // CustomGradient: the user's VJP (an autograd type; core only carries it).
  std::shared_ptr<const void> payload;
};

}  // namespace strata
