// Variable partitioners for ParameterServerStrategy (tf.distribute.experimental.partitioners):
// given a variable's shape and dtype, how many shards to split it into along axis 0. The
// strategy then places each shard on the next parameter server, round-robin.
//
//   FixedShardsPartitioner(2)                      -> min(2, shape[0]) shards
//   MinSizePartitioner(min_shard_bytes, max_shards) -> as many shards as keeps each at
//       least min_shard_bytes, at most max_shards and shape[0]
//   MaxSizePartitioner(max_shard_bytes, max_shards) -> as few shards as keeps each at most
//       max_shard_bytes (a single row may exceed it), at most max_shards when given
//
// The arithmetic is TensorFlow's (min_max_variable_partitioner and
// variable_axis_size_partitioner). Scalars are never partitioned.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <strata/core/dtype.h>
#include <strata/core/shape.h>

namespace strata::distribute {

// Returns the number of shards (>= 1) along axis 0 for a variable of this shape/dtype.
using VariablePartitioner = std::function<int64_t(const Shape& shape, DType dtype)>;

class FixedShardsPartitioner {
 public:
  explicit FixedShardsPartitioner(int64_t num_shards);
  int64_t operator()(const Shape& shape, DType dtype) const;

 private:
  int64_t num_shards_;
};

class MinSizePartitioner {
 public:
  explicit MinSizePartitioner(int64_t min_shard_bytes = 256 << 10, int64_t max_shards = 1);
  int64_t operator()(const Shape& shape, DType dtype) const;

 private:
  int64_t min_shard_bytes_, max_shards_;
};

class MaxSizePartitioner {
 public:
  explicit MaxSizePartitioner(int64_t max_shard_bytes, std::optional<int64_t> max_shards = std::nullopt);
  int64_t operator()(const Shape& shape, DType dtype) const;

 private:
  int64_t max_shard_bytes_;
  std::optional<int64_t> max_shards_;
};

// Rows of each of `num_shards` shards of `rows` rows: the first rows % num_shards shards
// get one row more (TensorFlow's ShardedVariable layout), e.g. 10 over 3 -> [4, 3, 3].
std::vector<int64_t> shard_rows(int64_t rows, int64_t num_shards);

}  // namespace strata::distribute
