// Process-wide numerical settings of the CUDA backend (public: <strata/kernels/cuda/settings.h>).
//
// TF32: on Ampere and later GPUs, float32 matrix products and convolutions can run on tensor
// cores with inputs rounded to TF32 (10-bit mantissa, float32 range and accumulation):
// several times faster, with about 3 significant digits per product instead of 7. Like
// PyTorch's `torch.backends.cuda.matmul.allow_tf32` (here one switch covers cuBLASLt
// matmuls and cuDNN convolutions) it is OFF by default, so that float32 results on the GPU
// agree with the CPU to float32 tolerance. float64, float16 and bfloat16 are unaffected
// (half types always accumulate in float32).
//
// The switch is read when an op is enqueued: flipping it affects later ops only. It is a
// plain process-wide flag, safe to set from any thread. It exists only in builds with the
// CUDA backend (strata_cuda defines it; such builds define STRATA_HAS_CUDA for users):
//
//   #if STRATA_HAS_CUDA
//   strata::backends::cuda::set_allow_tf32(true);
//   #endif
//
// (The namespace mirrors PyTorch's torch.backends.cuda; strata::cuda is the device function.)
#pragma once

namespace strata::backends::cuda {

void set_allow_tf32(bool allow);
bool allow_tf32();

// Sets allow_tf32 for a scope and restores the previous value on exit.
class AllowTf32Guard {
 public:
  explicit AllowTf32Guard(bool allow) : previous_(allow_tf32()) { set_allow_tf32(allow); }
  ~AllowTf32Guard() { set_allow_tf32(previous_); }
  AllowTf32Guard(const AllowTf32Guard&) = delete;
  AllowTf32Guard& operator=(const AllowTf32Guard&) = delete;

 private:
  bool previous_;
};

}  // namespace strata::backends::cuda
