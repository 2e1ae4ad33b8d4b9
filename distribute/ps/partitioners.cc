#include <strata/distribute/ps/partitioners.h>

#include <algorithm>
#include <cmath>

#include <strata/core/error.h>

namespace strata::distribute {

namespace {
// Rank >= 1 and a positive leading extent, or "do not partition".
bool partitionable(const Shape& shape) { return !shape.empty() && shape[0] > 0; }
}  // namespace

FixedShardsPartitioner::FixedShardsPartitioner(int64_t num_shards) : num_shards_(num_shards) {
  STRATA_CHECK(num_shards >= 1, "FixedShardsPartitioner: num_shards must be >= 1, got ", num_shards);
}

int64_t FixedShardsPartitioner::operator()(const Shape& shape, DType) const {
  if (!partitionable(shape)) return 1;
  return std::min(num_shards_, shape[0]);
}

MinSizePartitioner::MinSizePartitioner(int64_t min_shard_bytes, int64_t max_shards)
    : min_shard_bytes_(min_shard_bytes), max_shards_(max_shards) {
  STRATA_CHECK(min_shard_bytes >= 1, "MinSizePartitioner: min_shard_bytes must be >= 1, got ", min_shard_bytes);
  STRATA_CHECK(max_shards >= 1, "MinSizePartitioner: max_shards must be >= 1, got ", max_shards);
}

int64_t MinSizePartitioner::operator()(const Shape& shape, DType dtype) const {
  if (!partitionable(shape)) return 1;
  const double total_bytes = double(numel_of(shape)) * double(dtype_size(dtype));
  const auto by_size = int64_t(std::ceil(total_bytes / double(min_shard_bytes_)));
  return std::max<int64_t>(1, std::min({shape[0], max_shards_, by_size}));
}

MaxSizePartitioner::MaxSizePartitioner(int64_t max_shard_bytes, std::optional<int64_t> max_shards)
    : max_shard_bytes_(max_shard_bytes), max_shards_(max_shards) {
  STRATA_CHECK(max_shard_bytes >= 1, "MaxSizePartitioner: max_shard_bytes must be >= 1, got ", max_shard_bytes);
  STRATA_CHECK(!max_shards || *max_shards >= 1, "MaxSizePartitioner: max_shards must be >= 1, got ", *max_shards);
}

int64_t MaxSizePartitioner::operator()(const Shape& shape, DType dtype) const {
  if (!partitionable(shape)) return 1;
  const double bytes_per_slice = double(numel_of(shape) / shape[0]) * double(dtype_size(dtype));
  const auto slices_per_shard =
      std::max<int64_t>(1, bytes_per_slice > 0 ? int64_t(std::floor(double(max_shard_bytes_) / bytes_per_slice))
                                               : shape[0]);
  int64_t shards = (shape[0] + slices_per_shard - 1) / slices_per_shard;
  if (max_shards_) shards = std::min(*max_shards_, shards);
  return std::max<int64_t>(1, shards);
}

std::vector<int64_t> shard_rows(int64_t rows, int64_t num_shards) {
  STRATA_CHECK(num_shards >= 1 && num_shards <= std::max<int64_t>(rows, 1), "shard_rows: cannot split ", rows,
               " rows into ", num_shards, " shards");
  std::vector<int64_t> out(size_t(num_shards), rows / num_shards);
  for (int64_t i = 0; i < rows % num_shards; ++i) ++out[size_t(i)];
  return out;
}

}  // namespace strata::distribute
