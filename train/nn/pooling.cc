#include <strata/train/nn/pooling.h>

#include <strata/core/ops.h>

namespace strata::nn {

Pool2DImpl::Pool2DImpl(Mode mode, std::array<int64_t, 2> pool_size, Pool2DOptions options)
    : Module(mode == Mode::Max ? "max_pooling2d" : "average_pooling2d"),
      mode_(mode),
      pool_size_(pool_size),
      strides_(options.strides.value_or(pool_size)),
      padding_(options.padding) {
  STRATA_CHECK(pool_size_[0] > 0 && pool_size_[1] > 0 && strides_[0] > 0 && strides_[1] > 0,
               "nn::", kind(), ": pool size and strides must be positive, got [", pool_size_[0],
               ",", pool_size_[1], "] and [", strides_[0], ",", strides_[1], "]");
}

Tensor Pool2DImpl::forward(const Tensor& x) {
  STRATA_CHECK(x.ndim() == 4, "nn::", kind(), ": expected an NHWC input [N, H, W, C], got ",
               shape_str(x.shape()));
  return mode_ == Mode::Max ? max_pool2d(x, pool_size_, strides_, padding_)
                            : avg_pool2d(x, pool_size_, strides_, padding_);
}

MaxPool2D::MaxPool2D(std::array<int64_t, 2> pool_size, Pool2DOptions options)
    : ModuleHolder(std::make_shared<Pool2DImpl>(Pool2DImpl::Mode::Max, pool_size, options)) {}

AvgPool2D::AvgPool2D(std::array<int64_t, 2> pool_size, Pool2DOptions options)
    : ModuleHolder(std::make_shared<Pool2DImpl>(Pool2DImpl::Mode::Average, pool_size, options)) {}

}  // namespace strata::nn
