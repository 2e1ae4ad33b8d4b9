// The one kernel launch helper, and what kernel launchers need of the CUDA runtime.
//
// Kernel bodies live in .cuh files compiled twice: by nvcc into the CUDA backend
// (kernels/cuda/*.cu), and by g++ into the emulation tests with STRATA_CUDA_EMULATION
// defined, where tests/cuda_emulation/cuda_emu.h runs them on the CPU. Launches go through
// strata::cuda_backend::launch() only -- `<<<>>>` is not C++ and appears nowhere else -- and
// kernels keep to what the emulator runs: no CUB, Thrust, cooperative groups or inline PTX
// (those belong behind a wrapper with its own CPU-checked fallback).
//
// The runtime functions declared here are implemented by kernels/cuda/runtime.cc in the
// CUDA backend and by tests/cuda_emulation/emulated_runtime.cc in the emulation tests.
#pragma once

#include <cstddef>
#include <cstdint>

#include <strata/core/data_error.h>
#include <strata/core/stream.h>

#if defined(STRATA_CUDA_EMULATION)
#include "cuda_emu.h"  // tests/cuda_emulation, on the emulation target's include path
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <strata/kernels/cuda/check.h>
#endif

namespace strata::cuda_backend {

// Makes device `index` current for the calling thread's CUDA calls.
void set_device(int index);
// The device's deferred data-error record (core/data_error.h), in device memory: kernels
// that find a bad label or index fill it (first error wins, see record_data_error) and
// the next synchronisation of the device raises it.
DataError* device_data_error(int index);

inline cudaStream_t native_stream(const Stream& stream) {
  return static_cast<cudaStream_t>(stream.native_handle());
}

}  // namespace strata::cuda_backend

#if defined(__CUDACC__) || defined(STRATA_CUDA_EMULATION)  // kernel code: nvcc or emulation

namespace strata::cuda_backend {

// Threads per block of the elementwise kernels.
inline constexpr unsigned kBlockThreads = 256;

// The emulator runs one std::thread per CUDA thread: emulated launches use small blocks
// for small tensors and at most two blocks (grid-stride loops make the result independent
// of the launch shape, so this changes nothing but the emulation's speed).
inline unsigned block_for(int64_t n) {
#if defined(STRATA_CUDA_EMULATION)
  const int64_t t = (n + 31) / 32 * 32;
  return unsigned(t < 32 ? 32 : (t > int64_t(kBlockThreads) ? int64_t(kBlockThreads) : t));
#else
  (void)n;
  return kBlockThreads;
#endif
}

// Blocks of a grid-stride kernel over n elements with `threads` per block.
inline unsigned grid_for(int64_t n, unsigned threads = kBlockThreads) {
#if defined(STRATA_CUDA_EMULATION)
  constexpr int64_t kMaxBlocks = 2;
#else
  constexpr int64_t kMaxBlocks = 4096;
#endif
  int64_t blocks = (n + int64_t(threads) - 1) / int64_t(threads);
  if (blocks < 1) blocks = 1;
  return unsigned(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// The launch shape of a grid-stride elementwise kernel over n elements.
struct LaunchShape {
  dim3 grid, block;
};
inline LaunchShape elementwise_shape(int64_t n) {
  const unsigned threads = block_for(n);
  return {dim3(grid_for(n, threads)), dim3(threads)};
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) on the stream's device and turns
// a launch failure into a strata::Error naming `op`.
template <typename Kernel, typename... Args>
void launch(const char* op, Kernel kernel, dim3 grid, dim3 block, size_t smem, const Stream& stream,
            Args... args) {
  set_device(stream.device().index);
#if defined(STRATA_CUDA_EMULATION)
  (void)op;
  ::emu::launch(kernel, grid, block, smem, args...);
#else
  kernel<<<grid, block, smem, native_stream(stream)>>>(args...);
  STRATA_CUDA_CHECK(op, cudaGetLastError());
#endif
}

// Device code records a data error with record_data_error(rec, kind, op, value, position,
// limit, axis): the first error wins (a compare-and-swap on a claim word), later ones are
// dropped, as on the CPU only the first bad element is reported.
__device__ inline void record_data_error(DataError* rec, DataErrorKind kind, OpId op, int64_t value,
                                         int64_t position, int64_t limit, int64_t axis) {
  // The claim uses `kind` itself: 0 (None) -> -1 (being written) -> kind.
  int* k = reinterpret_cast<int*>(&rec->kind);
  if (atomicCAS(k, 0, -1) != 0) return;
  rec->op = op;
  rec->value = value;
  rec->position = position;
  rec->limit = limit;
  rec->axis = axis;
  __threadfence();
  atomicExch(k, int(kind));
}
}  // namespace strata::cuda_backend

#endif  // __CUDACC__ || STRATA_CUDA_EMULATION
