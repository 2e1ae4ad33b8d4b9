#include <strata/train/nn/embedding.h>

#include <strata/core/ops.h>

namespace strata::nn {

EmbeddingImpl::EmbeddingImpl(int64_t input_dim, int64_t output_dim, EmbeddingOptions options)
    : Module("embedding"), input_dim_(input_dim), output_dim_(output_dim) {
  STRATA_CHECK(input_dim > 0 && output_dim > 0,
               "nn::Embedding: input_dim and output_dim must be positive, got ", input_dim, " and ",
               output_dim);
  if (options.dtype) set_dtype_policy(*options.dtype);
  // Ids are never cast to the compute dtype (float ids would lose integers past 256 in
  // bfloat16); Keras's Embedding turns autocast off too.
  set_autocast(false);
  embeddings_ = add_weight("embeddings", {input_dim, output_dim}, variable_dtype(),
                           options.embeddings_initializer);
}

Tensor EmbeddingImpl::forward(const Tensor& ids) {
  const Tensor int_ids = is_integral(ids.dtype()) ? ids : cast(ids, kInt64);
  // Looked up in the variable dtype and then cast (as Keras does): only the rows used are
  // cast, and the table's gradient is scattered in the variable dtype.
  return autocast(embedding(embeddings_.read(), int_ids));
}

}  // namespace strata::nn
