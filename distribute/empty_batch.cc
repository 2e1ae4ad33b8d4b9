#include <strata/distribute/empty_batch.h>

#include <strata/core/error.h>

namespace strata::distribute {

BatchSpec spec_of(const data::Batch& batch) {
  BatchSpec spec;
  for (const Tensor& t : batch) {
    STRATA_CHECK(t.defined(), "distribute: a batch component is an undefined tensor");
    spec.emplace_back(t.dtype(), t.shape());
  }
  return spec;
}

std::string cannot_shape_empty(const BatchSpec& spec) {
  for (size_t k = 0; k < spec.size(); ++k) {
    if (spec[k].second.empty()) {
      return ::strata::detail::concat("component ", k, " has shape [], no batch axis to build an empty batch from");
    }
  }
  return "";
}

data::Batch empty_batch(const BatchSpec& spec, const Device& device, const std::string& whose) {
  const std::string why = cannot_shape_empty(spec);
  STRATA_CHECK(why.empty(), whose, "'s ", why);
  data::Batch empty;
  for (const auto& [dtype, shape] : spec) {
    Shape rows = shape;
    rows[0] = 0;
    empty.push_back(Tensor::empty(rows, dtype, device));
  }
  return empty;
}

std::vector<int64_t> encode_spec(const BatchSpec& spec) {
  std::vector<int64_t> words{int64_t(spec.size())};
  for (const auto& [dtype, shape] : spec) {
    words.push_back(int64_t(dtype));
    words.push_back(int64_t(shape.size()));
    words.insert(words.end(), shape.begin(), shape.end());
  }
  return words;
}

BatchSpec decode_spec(const std::vector<int64_t>& words, const std::string& from) {
  const auto bad = [&] {
    return Error(::strata::detail::concat(from, " sent a malformed description of its batches (", words.size(),
                                          " words)"));
  };
  size_t at = 0;
  const auto take = [&] {
    if (at >= words.size()) throw bad();
    return words[at++];
  };
  BatchSpec spec;
  const int64_t n = take();
  if (n < 0 || n > int64_t(words.size())) throw bad();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t dtype = take(), rank = take();
    if (dtype < 0 || dtype > int64_t(DType::Bool) || rank < 0 || rank > int64_t(words.size())) throw bad();
    Shape shape;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t extent = take();
      if (extent < 0) throw bad();
      shape.push_back(extent);
    }
    spec.emplace_back(DType(dtype), std::move(shape));
  }
  return spec;
}

}  // namespace strata::distribute
