// OpAttrs: the non-tensor arguments of an op call, recorded with it on the tape and handed
// to kernels.
//
// The fields every family shares (axes, shapes, conv geometry, a target dtype) are plain
// members. What only one family needs lives in that family's struct (GeluAttrs,
// FillAttrs, AdamAttrs, ...) held in `params`, read with `attrs.get<T>(op)`, which raises
// a strata::Error naming the op when the front-end passed another family's attributes.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <variant>
#include <vector>

#include <strata/core/dtype.h>
#include <strata/core/error.h>
#include <strata/core/op_id.h>
#include <strata/core/shape.h>

namespace strata {

enum class Padding : uint8_t { Valid, Same };

// ---- per-family attributes ----
struct GeluAttrs {
  bool approximate_tanh = false;
};
struct CumsumAttrs {
  bool exclusive = false;
  bool reverse = false;
};
struct PadAttrs {
  double value = 0.0;  // written into the padding
};
struct LayerNormAttrs {
  double epsilon = 1e-5;
};
// Fill: every element = value.
struct FillAttrs {
  double value = 0.0;
};
// Arange: element i = start + i * step. Linspace: start + (stop - start) * i / (n - 1).
struct RangeAttrs {
  double start = 0.0;
  double step = 1.0;  // arange
  double stop = 0.0;  // linspace
};
// Random draws (core/philox.h): element i depends only on (seed, i).
struct RandomAttrs {
  uint64_t seed = 0;
  double a = 0.0;  // uniform: low; normal/truncated normal: mean; bernoulli: p
  double b = 1.0;  // uniform: high; normal/truncated normal: stddev
};
// Fused optimizer updates (kernels/cpu/optimizer.cc), scalars as attributes so that no
// per-step tensor is made for them.
struct SgdAttrs {
  double learning_rate = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};
struct AdamAttrs {
  double learning_rate = 0.001;
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-7;
  double weight_decay = 0.0;
  bool decoupled = true;  // AdamW: param *= 1 - lr * wd; false (Adam): grad += param * wd
  int64_t step = 1;       // 1-based step for the bias corrections
};
// CustomGradient: the user's VJP (an autograd type; core only carries it).
struct CustomGradientAttrs {
  std::shared_ptr<const void> vjp;
};

using OpParams = std::variant<std::monostate, GeluAttrs, CumsumAttrs, PadAttrs, LayerNormAttrs,
                              FillAttrs, RangeAttrs, RandomAttrs, SgdAttrs, AdamAttrs,
                              CustomGradientAttrs>;

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
  bool transpose_a = false, transpose_b = false;  // matmul
  DType dtype = DType::Float32;  // cast target
  std::array<int64_t, 2> strides{1, 1};  // conv/pool
  std::array<int64_t, 2> window{1, 1};   // pool
  Padding padding = Padding::Valid;      // conv/pool
  OpParams params;                       // the op family's own attributes

  OpAttrs() = default;
  template <typename T>
    requires(!std::is_same_v<std::decay_t<T>, OpAttrs> && std::is_constructible_v<OpParams, T>)
  explicit OpAttrs(T family_params) : params(std::move(family_params)) {}

  // The family attributes of `op`; raises when the front-end set another family's.
  template <typename T>
  const T& get(OpId op) const {
    const T* p = std::get_if<T>(&params);
    STRATA_CHECK(p != nullptr, op_name(op), ": kernel expected its own attributes, got attributes of "
                 "another op family (index ", params.index(), ")");
    return *p;
  }
};

}  // namespace strata
