// Internal to the op-info library: each op family's file appends its entries to the table,
// with the small helpers they share for writing samples.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/ops.h>
#include "tests/op_info/op_info.h"

namespace strata::testing {

void add_elementwise_entries(std::vector<OpInfo>& table);   // unary, binary, where, cast, copy
void add_reduce_shape_entries(std::vector<OpInfo>& table);  // reductions, shape and indexing
void add_nn_entries(std::vector<OpInfo>& table);            // matmul, nn, images, custom_gradient
void add_creation_entries(std::vector<OpInfo>& table);      // creation, random, optimizer updates

namespace entries {

inline const std::vector<DType> kFloatTypes = {kFloat32, kFloat64, kFloat16, kBFloat16};
inline const std::vector<DType> kNumericTypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64};
inline const std::vector<DType> kAllTypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};

using OneOutput = std::function<Tensor(const std::vector<Tensor>&)>;

// A sample of a single-output op.
inline OpSample make_sample(std::string description, std::vector<Tensor> inputs, OneOutput f,
                            Shape output_shape, DType output_dtype) {
  OpSample s;
  s.description = std::move(description);
  s.inputs = std::move(inputs);
  s.call = [f = std::move(f)](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; };
  s.output_shapes = {std::move(output_shape)};
  s.output_dtypes = {output_dtype};
  return s;
}

using Outputs = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// A sample of an op with `outputs` outputs, all of one shape and dtype.
inline OpSample make_sample(std::string description, std::vector<Tensor> inputs, Outputs call, size_t outputs,
                            const Shape& output_shape, DType output_dtype) {
  OpSample s;
  s.description = std::move(description);
  s.inputs = std::move(inputs);
  s.call = std::move(call);
  s.output_shapes.assign(outputs, output_shape);
  s.output_dtypes.assign(outputs, output_dtype);
  return s;
}

inline std::string str(const Shape& s) { return shape_str(s); }

}  // namespace entries
}  // namespace strata::testing
