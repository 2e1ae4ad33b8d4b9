// Embedding: integer ids of any shape -> their rows of a [input_dim, output_dim] table
// (Keras's Embedding; the table is initialised uniformly in [-0.05, 0.05] by default).
#pragma once

#include <cstdint>
#include <optional>

#include <strata/train/nn/module.h>

namespace strata::nn {

struct EmbeddingOptions {
  // The layer's dtype policy (a mixed_precision::Policy, its name or a DType); by default
  // the global policy when the layer is constructed.
  std::optional<mixed_precision::Policy> dtype{};
  Initializer embeddings_initializer = random_uniform(-0.05, 0.05);
};

class EmbeddingImpl : public Module {
 public:
  EmbeddingImpl(int64_t input_dim, int64_t output_dim, EmbeddingOptions options = {});
  // ids (integer; floats are cast as Keras does) -> ids.shape + [output_dim].
  Tensor forward(const Tensor& ids) override;
  const Variable& embeddings() const { return embeddings_; }

 private:
  int64_t input_dim_, output_dim_;
  Variable embeddings_;
};

class Embedding : public ModuleHolder<EmbeddingImpl> {
 public:
  Embedding() = default;
  Embedding(int64_t input_dim, int64_t output_dim, EmbeddingOptions options = {})
      : ModuleHolder(std::make_shared<EmbeddingImpl>(input_dim, output_dim, std::move(options))) {}
};

}  // namespace strata::nn
