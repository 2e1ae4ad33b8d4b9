// cuda_emu.h -- test-only CPU execution of CUDA-C++ kernels, compiled by g++.
//
// Adopted from ../shared/cuda_emulation (the prototype) and owned here. It lets the
// emulation tests compile the hand-written kernel bodies (kernels/cuda/*.cuh) and run
// them on the CPU, so CI without a GPU compares every hand-written kernel with the CPU
// backend. It is a test harness, never part of the product.
//
// How it runs a launch: blocks one after another (so `static` locals behave like
// __shared__ memory), each CUDA thread on a std::thread of a persistent pool;
// __syncthreads is a std::barrier that finished threads drop out of; warp *_sync
// intrinsics exchange through a per-warp slot array and a barrier over the lanes in
// `mask`; atomics use std::atomic_ref.
//
// Launches are serialised by one process-wide mutex: the launch state (blockDim, gridDim,
// the current block and `__shared__` statics) is global, and two replica threads may
// launch at once. Emulated streams are immediate: a launch has finished when it returns.
//
// Limits: CUB, Thrust, cooperative groups and inline PTX cannot run here; a grid-wide sync
// or a block spinning on another block deadlocks (blocks are sequential); missing
// __threadfence bugs do not show; one OS thread per CUDA thread of a block is slow (every
// launch wakes them all), so launches use few, small blocks (kernels/cuda/launch.h) and
// tests keep shapes small.
#pragma once
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__
#include <cuda_bf16.h>
#include <cuda_fp16.h>  // host paths of __half / __nv_bfloat16 work with g++

#include <algorithm>
#include <atomic>
#include <barrier>
#include <bit>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <functional>
#include <mutex>
#include <semaphore>
#include <thread>
#include <vector>

namespace emu {
inline thread_local uint3 threadIdx_, blockIdx_;
inline dim3 blockDim_, gridDim_;
struct WarpSync {  // generation barrier whose participant count is given per call
  std::mutex m;
  std::condition_variable cv;
  unsigned arrived = 0, gen = 0;
  alignas(16) unsigned char slot[32][16];
  void wait(unsigned expected) {
    std::unique_lock l(m);
    unsigned g = gen;
    if (++arrived == expected) {
      arrived = 0;
      ++gen;
      cv.notify_all();
    } else {
      cv.wait(l, [&] { return gen != g; });
    }
  }
};
struct Block {
  std::unique_ptr<std::barrier<>> bar;
  std::vector<std::unique_ptr<WarpSync>> warps;
  unsigned nthreads = 0;
  std::vector<unsigned char> dyn_smem;
};
inline Block* block_ = nullptr;
// Serialises launches: the state above is shared by every kernel thread of one launch.
inline std::mutex& launch_mutex() {
  static std::mutex m;
  return m;
}
inline std::atomic<int64_t>& launch_count() {
  static std::atomic<int64_t> n{0};
  return n;
}
inline unsigned linear_tid() { return threadIdx_.x + blockDim_.x * (threadIdx_.y + blockDim_.y * threadIdx_.z); }
inline unsigned lane() { return linear_tid() & 31u; }
inline unsigned warp_lanes_mask() {  // lanes that exist in this warp (tail warp may be partial)
  unsigned base = linear_tid() & ~31u, n = std::min(32u, block_->nthreads - base);
  return n == 32 ? 0xffffffffu : ((1u << n) - 1u);
}
template <class T>
T exchange(unsigned mask, T v, int src_lane) {
  static_assert(sizeof(T) <= 16);
  WarpSync& w = *block_->warps[linear_tid() >> 5];
  unsigned expected = std::popcount(mask & warp_lanes_mask());
  std::memcpy(w.slot[lane()], &v, sizeof(T));
  w.wait(expected);
  T r = v;
  if (src_lane >= 0 && src_lane < 32 && (mask >> src_lane & 1u)) std::memcpy(&r, w.slot[src_lane], sizeof(T));
  w.wait(expected);
  return r;
}
// Persistent worker threads, one per CUDA thread of the largest block launched so far:
// creating std::threads per launch dominated the emulation's run time (and is far more
// expensive under ThreadSanitizer). run() wakes workers 0..nt-1, each runs body(its id),
// and returns once all of them have finished. Used under the launch mutex only.
class WorkerPool {
 public:
  void run(unsigned nt, const std::function<void(unsigned)>& body) {
    while (workers_.size() < nt) workers_.push_back(std::make_unique<Worker>(this, unsigned(workers_.size())));
    body_ = &body;
    remaining_.store(nt, std::memory_order_relaxed);
    for (unsigned t = 0; t < nt; ++t) workers_[t]->go.release();
    done_.acquire();
    body_ = nullptr;
  }
  ~WorkerPool() {
    stop_.store(true);
    for (auto& w : workers_) w->go.release();
    for (auto& w : workers_) w->thread.join();
  }

 private:
  struct Worker {
    std::binary_semaphore go{0};
    std::thread thread;
    Worker(WorkerPool* pool, unsigned id) : thread([pool, id, this] { pool->loop(id, *this); }) {}
  };
  void loop(unsigned id, Worker& w) {
    for (;;) {
      w.go.acquire();
      if (stop_.load()) return;
      (*body_)(id);
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.release();
    }
  }
  std::vector<std::unique_ptr<Worker>> workers_;
  const std::function<void(unsigned)>* body_ = nullptr;
  std::atomic<unsigned> remaining_{0};
  std::binary_semaphore done_{0};
  std::atomic<bool> stop_{false};
};
inline WorkerPool& worker_pool() {
  static WorkerPool pool;
  return pool;
}

// Runs the grid on nt pooled threads, each running its CUDA thread of every block in turn
// (blocks stay sequential; a barrier between blocks sets up the next block's
// __syncthreads barrier, warp exchanges and dynamic shared memory).
template <class K, class... A>
void launch(K kernel, dim3 grid, dim3 block, size_t dyn_smem, A... args) {
  std::lock_guard<std::mutex> serial(launch_mutex());
  launch_count().fetch_add(1, std::memory_order_relaxed);
  const unsigned nt = block.x * block.y * block.z;
  const unsigned nblocks = grid.x * grid.y * grid.z;
  if (nt == 0 || nblocks == 0) return;
  blockDim_ = block;
  gridDim_ = grid;
  Block b;
  b.nthreads = nt;
  auto setup = [&]() noexcept {
    b.bar = std::make_unique<std::barrier<>>(nt);
    b.warps.clear();
    for (unsigned w = 0; w < (nt + 31) / 32; ++w) b.warps.push_back(std::make_unique<WarpSync>());
    b.dyn_smem.assign(dyn_smem, 0);
  };
  setup();
  block_ = &b;
  std::barrier step(nt, setup);  // all threads done with a block -> set up the next one
  const std::function<void(unsigned)> body = [&](unsigned t) {
    threadIdx_ = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
    for (unsigned i = 0; i < nblocks; ++i) {
      blockIdx_ = {i % grid.x, (i / grid.x) % grid.y, i / (grid.x * grid.y)};
      kernel(args...);
      b.bar->arrive_and_drop();  // exited threads no longer count for __syncthreads
      step.arrive_and_wait();
    }
  };
  worker_pool().run(nt, body);
  block_ = nullptr;
}
}  // namespace emu
#define threadIdx (::emu::threadIdx_)
#define blockIdx (::emu::blockIdx_)
#define blockDim (::emu::blockDim_)
#define gridDim (::emu::gridDim_)
inline void __syncthreads() { emu::block_->bar->arrive_and_wait(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::exchange(mask, 0, -1); }
namespace emu {
// A full fence. ThreadSanitizer does not model std::atomic_thread_fence (GCC refuses it
// under -fsanitize=thread): there, a sequentially consistent read-modify-write on one
// shared atomic stands in for it.
inline void fence() {
#if defined(__SANITIZE_THREAD__)
  static std::atomic<unsigned> word{0};
  word.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}
}  // namespace emu
inline void __threadfence() { emu::fence(); }
inline void __threadfence_system() { emu::fence(); }
template <class T>
T __shfl_sync(unsigned m, T v, int src, int w = 32) {
  return emu::exchange(m, v, (int)(emu::lane() & ~(w - 1)) + (src & (w - 1)));
}
template <class T>
T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) {
  int l = emu::lane(), s = l + (int)d;
  return emu::exchange(m, v, (s & ~(w - 1)) == (l & ~(w - 1)) ? s : l);
}
template <class T>
T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) {
  int l = emu::lane(), s = l - (int)d;
  return emu::exchange(m, v, (s >= (l & ~(w - 1))) ? s : l);
}
template <class T>
T __shfl_xor_sync(unsigned m, T v, int x, int w = 32) {
  int l = emu::lane(), s = l ^ x;
  return emu::exchange(m, v, (s & ~(w - 1)) == (l & ~(w - 1)) ? s : l);
}
inline unsigned __ballot_sync(unsigned m, int p) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= (unsigned)(__shfl_sync(m, p ? 1 : 0, i) != 0) << i;
  return r & m;
}
template <class T>
T atomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v);
}
template <class T>
T atomicMax(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T o = a.load();
  while (o < v && !a.compare_exchange_weak(o, v)) {
  }
  return o;
}
template <class T>
T atomicMin(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T o = a.load();
  while (v < o && !a.compare_exchange_weak(o, v)) {
  }
  return o;
}
template <class T>
T atomicCAS(T* p, T cmp, T v) {
  std::atomic_ref<T>(*p).compare_exchange_strong(cmp, v);
  return cmp;
}
template <class T>
T atomicExch(T* p, T v) {
  return std::atomic_ref<T>(*p).exchange(v);
}
namespace emu {
// 16-bit float atomicAdd as the GPU does it: a compare-and-swap loop on the 16 bits, the
// sum computed in float and rounded to nearest even (the scatter-add gradient needs it).
template <class H, class ToFloat, class FromFloat>
H atomic_add_16(H* p, H v, ToFloat to_float, FromFloat from_float) {
  static_assert(sizeof(H) == 2);
  std::atomic_ref<uint16_t> a(*reinterpret_cast<uint16_t*>(p));
  uint16_t old = a.load();
  for (;;) {
    H o;
    std::memcpy(static_cast<void*>(&o), &old, 2);
    const H sum = from_float(to_float(o) + to_float(v));
    uint16_t bits;
    std::memcpy(&bits, static_cast<const void*>(&sum), 2);
    if (a.compare_exchange_weak(old, bits)) return o;
  }
}
}  // namespace emu
inline __half atomicAdd(__half* p, __half v) {
  return emu::atomic_add_16(p, v, [](__half h) { return __half2float(h); },
                            [](float f) { return __float2half_rn(f); });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
  return emu::atomic_add_16(p, v, [](__nv_bfloat16 h) { return __bfloat162float(h); },
                            [](float f) { return __float2bfloat16_rn(f); });
}
template <class T>
T __ldg(const T* p) {
  return *p;
}
#define STRATA_DYNAMIC_SMEM(T, name) T* name = reinterpret_cast<T*>(::emu::block_->dyn_smem.data())
