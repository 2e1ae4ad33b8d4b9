// Sequential: layers applied one after the other (Keras's Sequential).
//
//   nn::Sequential model{nn::Dense(784, 256), nn::ReLU(), nn::Dense(256, 10)};
//
// Each layer is registered under a name: the one given to add(name, layer), else its kind
// with a counter private to this Sequential ("dense", "dense_1", "conv2d", ...), so the
// object paths of a model depend only on its structure.
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include <strata/train/nn/module.h>

namespace strata::nn {

class SequentialImpl : public Module {
 public:
  // A container does not cast its input: each layer casts to its own policy.
  SequentialImpl() : Module("sequential") { set_autocast(false); }
  Tensor forward(const Tensor& x) override;

  // Appends a layer named by its kind; returns the name it got.
  std::string add(const AnyModule& layer);
  // Appends a layer under an explicit name.
  std::string add(const std::string& name, const AnyModule& layer);

  size_t size() const { return layers_.size(); }
  const AnyModule& operator[](size_t i) const;
  const std::vector<AnyModule>& layers() const { return layers_; }
  // The name each layer was registered under, in order.
  std::vector<std::string> layer_names() const;

 private:
  std::vector<AnyModule> layers_;
  std::map<std::string, int> kind_counts_;
};

class Sequential : public ModuleHolder<SequentialImpl> {
 public:
  Sequential() : ModuleHolder(std::make_shared<SequentialImpl>()) {}
  Sequential(std::initializer_list<AnyModule> layers);
  explicit Sequential(const std::vector<AnyModule>& layers);

  std::string add(const AnyModule& layer) const { return impl().add(layer); }
  std::string add(const std::string& name, const AnyModule& layer) const {
    return impl().add(name, layer);
  }
  size_t size() const { return impl().size(); }
  const AnyModule& operator[](size_t i) const { return impl()[i]; }
};

}  // namespace strata::nn
