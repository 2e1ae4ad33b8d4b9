// Empty batches for replicas without input: when a replica's (or a worker's) input has
// ended while another's goes on, it still runs the step, on a batch of zero rows shaped
// like the batches it would have had (TensorFlow's partial batches). Shared by the
// per-replica pipelines stage and the distributed iterator.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/device.h>
#include <strata/core/tensor.h>
#include <strata/data/dataset.h>

namespace strata::distribute {

// A batch's components: dtype and shape of each.
using BatchSpec = std::vector<std::pair<DType, Shape>>;

BatchSpec spec_of(const data::Batch& batch);
// Why no empty batch can be shaped like `spec` (a component without a batch axis), or "".
std::string cannot_shape_empty(const BatchSpec& spec);
// A batch of zero rows shaped like `spec`, on `device` (throws unless cannot_shape_empty
// is "", naming `whose` batches it was to be shaped like).
data::Batch empty_batch(const BatchSpec& spec, const Device& device, const std::string& whose);

// The spec as int64 words ([components, then dtype, rank and extents of each]) and back;
// decode throws strata::Error naming `from` on words that are not such a spec.
std::vector<int64_t> encode_spec(const BatchSpec& spec);
BatchSpec decode_spec(const std::vector<int64_t>& words, const std::string& from);

}  // namespace strata::distribute
