// contiguous_untaped(t): t itself when contiguous, else a contiguous copy on t's own device,
// made by the registered Copy kernel of that device on its current stream. For kernels and
// backends (no tape: the front-end op that called them is what autograd records).
#pragma once

#include <strata/core/tensor.h>

namespace strata {

Tensor contiguous_untaped(const Tensor& t);

}  // namespace strata
