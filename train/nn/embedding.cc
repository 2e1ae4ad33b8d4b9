#include "train/nn/embedding.h"

#include "core/ops.h"

namespace strata::nn {

EmbeddingImpl::EmbeddingImpl(int64_t input_dim, int64_t output_dim, EmbeddingOptions options)
    : Module("embedding"), input_dim_(input_dim), output_dim_(output_dim) {
  STRATA_CHECK(input_dim > 0 && output_dim > 0,
               "nn::Embedding: input_dim and output_dim must be positive, got ", input_dim, " and ",
               output_dim);
  embeddings_ = add_weight("embeddings", {input_dim, output_dim}, options.dtype,
                           options.embeddings_initializer);
}

Tensor EmbeddingImpl::forward(const Tensor& ids) {
  const Tensor int_ids = is_integral(ids.dtype()) ? ids : cast(ids, kInt64);
  return embedding(embeddings_.read(), int_ids);
}

}  // namespace strata::nn
