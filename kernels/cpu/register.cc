// register_cpu_kernels(): the one place that lists the CPU kernel families. The CPU is
// the host backend, compiled into strata_core; core/dispatch.cc runs this before any
// other backend's registration.
#include <strata/core/dispatch.h>

namespace strata {
namespace cpu_kernels {
void register_elementwise_kernels();
void register_reduce_kernels();
void register_shape_kernels();
void register_linalg_kernels();
void register_nn_kernels();
void register_conv_kernels();
void register_creation_kernels();
void register_optimizer_kernels();
}  // namespace cpu_kernels

void register_cpu_kernels() {
  cpu_kernels::register_elementwise_kernels();
  cpu_kernels::register_reduce_kernels();
  cpu_kernels::register_shape_kernels();
  cpu_kernels::register_linalg_kernels();
  cpu_kernels::register_nn_kernels();
  cpu_kernels::register_conv_kernels();
  cpu_kernels::register_creation_kernels();
  cpu_kernels::register_optimizer_kernels();
}

}  // namespace strata
