// The emulator itself (cuda_emu.h): warp shuffles with divergent control flow, shared
// memory with __syncthreads, and the 16-bit float atomicAdd the scatter-add gradient needs.
#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include <strata/kernels/cuda/launch.h>

namespace {

template <class T>
__device__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// The idiomatic CUDA block sum: only warp 0 runs the second stage.
__global__ void block_sum(const double* x, double* out, int n) {
  __shared__ double ws[32];
  double v = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += x[i];
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) ws[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < (blockDim.x >> 5) ? ws[threadIdx.x] : 0.0;
    v = warp_sum(v);
    if (threadIdx.x == 0) atomicAdd(out, v);
  }
}

__global__ void add_halves(__half* h, __nv_bfloat16* b, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    atomicAdd(h, __float2half_rn(1.0f));
    atomicAdd(b, __float2bfloat16_rn(1.0f));
  }
}

strata::Stream host_stream() { return strata::Stream(strata::cuda(0), 0); }

}  // namespace

TEST_CASE("emulator: warp shuffles, shared memory and __syncthreads", "[cuda-emulation]") {
  const int n = 5000;
  std::vector<double> x(n);
  for (int i = 0; i < n; ++i) x[size_t(i)] = (i % 7) * 0.5;
  for (unsigned threads : {32u, 96u, 256u}) {
    double out = 0;
    strata::cuda_backend::launch("test", block_sum, dim3(2), dim3(threads), 0, host_stream(), x.data(), &out, n);
    CHECK(out == std::accumulate(x.begin(), x.end(), 0.0));
  }
}

TEST_CASE("emulator: float16 and bfloat16 atomicAdd", "[cuda-emulation]") {
  __half h = __float2half_rn(0.0f);
  __nv_bfloat16 b = __float2bfloat16_rn(0.0f);
  strata::cuda_backend::launch("test", add_halves, dim3(1), dim3(64), 0, host_stream(), &h, &b, 200);
  CHECK(__half2float(h) == 200.0f);
  CHECK(__bfloat162float(b) == 200.0f);  // integers up to 256 are exact in bfloat16
}
