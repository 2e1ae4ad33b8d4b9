#include <strata/train/nn/sequential.h>

namespace strata::nn {

Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& layer : layers_) h = layer(h);
  return h;
}

std::string SequentialImpl::add(const AnyModule& layer) {
  STRATA_CHECK(layer.defined(), "nn::Sequential::add: layer ", layers_.size(),
               " is an empty module handle");
  const std::string& kind = layer.module().kind();
  auto taken = [&](const std::string& name) {
    for (const auto& [n, m] : children())
      if (n == name) return true;
    for (const auto& [n, v] : own_variables())
      if (n == name) return true;
    return false;
  };
  std::string name;
  do {
    const int k = kind_counts_[kind]++;
    name = k == 0 ? kind : kind + "_" + std::to_string(k);
  } while (taken(name));
  return add(name, layer);
}

std::string SequentialImpl::add(const std::string& name, const AnyModule& layer) {
  STRATA_CHECK(layer.defined(), "nn::Sequential::add: layer '", name, "' is an empty module handle");
  register_module(name, layer.ptr());
  layers_.push_back(layer);
  return name;
}

const AnyModule& SequentialImpl::operator[](size_t i) const {
  STRATA_CHECK(i < layers_.size(), "nn::Sequential: layer index ", i, " out of range (",
               layers_.size(), " layers)");
  return layers_[i];
}

std::vector<std::string> SequentialImpl::layer_names() const {
  std::vector<std::string> names;
  for (const auto& [n, m] : children()) names.push_back(n);
  return names;
}

Sequential::Sequential(std::initializer_list<AnyModule> layers) : Sequential() {
  for (const auto& layer : layers) impl().add(layer);
}

Sequential::Sequential(const std::vector<AnyModule>& layers) : Sequential() {
  for (const auto& layer : layers) impl().add(layer);
}

}  // namespace strata::nn
