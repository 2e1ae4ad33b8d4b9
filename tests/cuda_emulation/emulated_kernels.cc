// The hand-written CUDA kernel families, compiled by g++ against cuda_emu.h: the same
// .cuh files nvcc compiles into kernels/cuda/*.cu. One translation unit per family
// (emulated_<family>.cc), so they compile in parallel and a change to one family
// recompiles only it. A new family: its emulated_<family>.cc, one line in
// CMakeLists.txt, and one declaration and call below (and its .cu file in kernels/cuda).
#include "tests/cuda_emulation/emulated_runtime.h"

namespace strata::cuda_emulation {

void register_emulated_elementwise();
void register_emulated_creation();
void register_emulated_shape();
void register_emulated_optimizer();
void register_emulated_reduce();
void register_emulated_nn();
void register_emulated_pool();

void register_emulated_kernels() {
  register_emulated_elementwise();
  register_emulated_creation();
  register_emulated_shape();
  register_emulated_optimizer();
  register_emulated_reduce();
  register_emulated_nn();
  register_emulated_pool();
}

}  // namespace strata::cuda_emulation
