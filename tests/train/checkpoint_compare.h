// A checkpoint's tensors by name and their exact comparison, for the tests that compare
// two training runs through what they saved: the ZeRO tests (tests/distribute) and the
// strata-train program tests (tests/tools). Catch-free and without nlohmann/json, so that
// a test that needs neither does not parse them.
#pragma once

#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include <strata/core/tensor.h>
#include <strata/train/checkpoint_file.h>

namespace strata::testing {

using TensorsByName = std::map<std::string, Tensor>;

// The tensors of the checkpoint at `prefix` (train::load_tensors).
inline TensorsByName checkpoint_tensors(const std::filesystem::path& prefix) {
  return train::load_tensors(prefix).tensors;
}

// The tensors of the checkpoint a strata-train --report names (its "checkpoint" key); a
// template so that this header need not include nlohmann/json.
template <typename Json>
TensorsByName reported_checkpoint_tensors(const Json& report) {
  return checkpoint_tensors(report["checkpoint"].template get<std::string>());
}

// The same names, and under each name the same shape, dtype and bits.
inline bool same_tensors(const TensorsByName& a, const TensorsByName& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.shape() != t.shape() || it->second.dtype() != t.dtype() ||
        std::memcmp(it->second.contiguous().raw_data(), t.contiguous().raw_data(), t.nbytes()) != 0)
      return false;
  }
  return true;
}

}  // namespace strata::testing
