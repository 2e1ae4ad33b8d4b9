// gpu suite: strata on a CUDA device (Options::device, strata-bench --device) against the
// libraries it stands on, measured in the same run:
//   - matmul float32 and bfloat16, 4096^3 and 8192^3 (TFLOP/s), against cuBLAS called
//     directly on buffers of its own (float32 without TF32; the TF32 rate is printed after
//     the row as cublas_tf32; bfloat16 in and out with float32 accumulation), with the
//     relative error ||strata - cuBLAS|| / ||cuBLAS|| after the row;
//   - add of 256M floats (GB/s, 12 bytes per element) against a device-to-device
//     cudaMemcpy of 256M floats (GB/s, 8 bytes per element: read + write);
//   - input fetch: steps/s of a loop of products and distributed batches fetched to the
//     device on its input stream, against a blocking upload on the default stream;
//   - training steps/s of the MLP (batch 128) and the MNIST CNN (batch 64) under
//     OneDeviceStrategy(device), against the Default strategy on the CPU;
//   - all-reduce bus bandwidth of 2 logical replicas of the device (MirroredStrategy over
//     {device, device}: they reduce in device memory, NCCL refusing two ranks on one GPU),
//     1 MB and 64 MB per replica, against a device-to-device cudaMemcpy of the same bytes.
// bench/compare/torch_gpu.py times the same workloads in PyTorch; scripts/gpu-check.sh runs
// both and merges them. Timing: warm-up, then repetitions of several calls each, the
// device synchronised before the host clock is read; medians.
//
// A row that cannot be measured (e.g. an op without a CUDA kernel yet) carries an error
// instead of failing the suite. Inputs are random normal (never zeros, METHOD.md).
#include <cmath>
#include <functional>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench.h"
#include <strata/core/error.h>
#include <strata/core/half.h>
#include <strata/core/ops.h>
#include <strata/core/random.h>
#include <strata/core/stream.h>
#include <strata/data/dataset.h>
#include <strata/distribute/distributed_dataset.h>
#include <strata/distribute/replica_context.h>
#include <strata/distribute/strategy.h>
#include <strata/train/nn/nn.h>

#ifdef STRATA_HAS_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

namespace strata::bench {

#ifndef STRATA_HAS_CUDA

std::vector<Result> gpu_suite(const Options&) {
  fail("strata-bench: the gpu suite needs a build with the CUDA backend (-DSTRATA_CUDA=ON)");
}

#else

namespace {

void cuda_check(cudaError_t e, const char* what) {
  STRATA_CHECK(e == cudaSuccess, "gpu suite: ", what, ": ", cudaGetErrorString(e));
}
void cublas_check(cublasStatus_t s, const char* what) {
  STRATA_CHECK(s == CUBLAS_STATUS_SUCCESS, "gpu suite: ", what, ": cuBLAS status ", int(s));
}

// A device buffer of the baseline's own (not strata's allocator).
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { cuda_check(cudaMalloc(&p, bytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct PinnedBuffer {
  void* p = nullptr;
  explicit PinnedBuffer(size_t bytes) { cuda_check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc"); }
  ~PinnedBuffer() { cudaFreeHost(p); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

struct Cublas {
  cublasHandle_t h = nullptr;
  Cublas() { cublas_check(cublasCreate(&h), "cublasCreate"); }
  ~Cublas() { cublasDestroy(h); }
};

// Per-call seconds (median over reps) of `inner` calls of fn, synchronising with sync()
// before each clock read.
Timing time_device(const std::function<void()>& fn, const std::function<void()>& sync, int reps, int inner) {
  Timing t = time_it([&] {
    for (int i = 0; i < inner; ++i) fn();
    sync();
  }, reps, 1, 1);
  t.median_s /= inner, t.min_s /= inner, t.max_s /= inner;
  return t;
}

double rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

std::vector<float> bf16_bits_to_float(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t w = uint32_t(bits[i]) << 16;
    std::memcpy(&out[i], &w, 4);
  }
  return out;
}

// Row-major C[n x n] = A B through column-major cuBLAS: C^T = B^T A^T.
void cublas_matmul(cublasHandle_t h, int64_t n, const void* a, const void* b, void* c, cudaDataType_t type,
                   cublasComputeType_t compute) {
  const float alpha = 1.0f, beta = 0.0f;
  cublas_check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(n), int(n), &alpha, b, type, int(n), a, type,
                            int(n), &beta, c, type, int(n), compute, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

void add_matmul(std::vector<Result>& out, Device dev, Cublas& blas, int64_t n, DType dtype, int reps) {
  const bool bf16 = dtype == kBFloat16;
  const std::string name = std::string("matmul ") + (bf16 ? "bf16 " : "f32 ") + std::to_string(n) + "^3";
  const double flops = 2.0 * double(n) * double(n) * double(n);
  const int inner = n >= 8192 ? 5 : 20;
  Result r{"gpu", name, 0, "TFLOP/s", 0,
           bf16 ? "cuBLAS bf16 (fp32 accumulate)" : "cuBLAS fp32 (no TF32)", 0};
  try {
    Tensor ha = random::normal({n, n}, 11), hb = random::normal({n, n}, 12);
    if (bf16) ha = cast(ha, kBFloat16), hb = cast(hb, kBFloat16);
    const size_t bytes = size_t(n * n) * (bf16 ? 2 : 4);
    // The baseline first: it stands even when strata's kernel is missing.
    DeviceBuffer da(bytes), db(bytes), dc(bytes);
    auto host = [&](const Tensor& t) -> const void* {
      return bf16 ? static_cast<const void*>(t.data<BFloat16>()) : static_cast<const void*>(t.data<float>());
    };
    cuda_check(cudaMemcpy(da.p, host(ha), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_check(cudaMemcpy(db.p, host(hb), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    const cudaDataType_t type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    auto sync_cuda = [] { cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); };
    const Timing tb = time_device([&] { cublas_matmul(blas.h, n, da.p, db.p, dc.p, type, CUBLAS_COMPUTE_32F); },
                                  sync_cuda, reps, inner);
    r.baseline_value = flops / tb.median_s / 1e12;
    std::vector<float> ref(size_t(n * n));
    if (bf16) {
      std::vector<uint16_t> bits(size_t(n * n));
      cuda_check(cudaMemcpy(bits.data(), dc.p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
      ref = bf16_bits_to_float(bits);
    } else {
      const Timing tf = time_device(
          [&] { cublas_matmul(blas.h, n, da.p, db.p, dc.p, type, CUBLAS_COMPUTE_32F_FAST_TF32); }, sync_cuda, reps,
          inner);
      r.extra.push_back({"cublas_tf32", flops / tf.median_s / 1e12});
      cublas_matmul(blas.h, n, da.p, db.p, dc.p, type, CUBLAS_COMPUTE_32F);  // the fp32 result again
      cuda_check(cudaMemcpy(ref.data(), dc.p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    }
    DeviceGuard on(dev);
    const Tensor a = ha.to(dev), b = hb.to(dev);
    Tensor c;
    const Timing ts = time_device([&] { c = matmul(a, b); }, [&] { synchronize(dev); }, reps, inner);
    r.value = flops / ts.median_s / 1e12;
    r.spread = ts.spread();
    r.extra.push_back({"rel_err", rel_error(c.to_vector<float>(), ref)});
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  out.push_back(std::move(r));
}

void add_elementwise(std::vector<Result>& out, Device dev, int64_t n, int reps) {
  const std::string sz = std::to_string(n >> 20) + "M";
  Result r{"gpu", "add f32 " + sz, 0, "GB/s", 0, "cudaMemcpy device to device, " + sz + " f32 (8 B/elem)", 0};
  try {
    const size_t bytes = size_t(n) * 4;
    auto sync_cuda = [] { cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); };
    {
      DeviceBuffer src(bytes), dst(bytes);
      cuda_check(cudaMemset(src.p, 0x3f, bytes), "cudaMemset");
      const Timing tc = time_device(
          [&] { cuda_check(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpy"); },
          sync_cuda, reps, 20);
      r.baseline_value = 8.0 * double(n) / tc.median_s / 1e9;
    }
    DeviceGuard on(dev);
    const Tensor a = random::normal({n}, 13).to(dev), b = random::normal({n}, 14).to(dev);
    Tensor c;
    const Timing ts = time_device([&] { c = add(a, b); }, [&] { synchronize(dev); }, reps, 20);
    r.value = 12.0 * double(n) / ts.median_s / 1e9;
    r.spread = ts.spread();
    // Spot check: the sum of a few elements against the host.
    const Tensor hs = add(a.slice(0, 0, 1024).to(Device()), b.slice(0, 0, 1024).to(Device()));
    r.extra.push_back({"rel_err", rel_error(c.slice(0, 0, 1024).to_vector<float>(), hs.to_vector<float>())});
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  out.push_back(std::move(r));
}

// Copies between the host and the GPU: strata's non-blocking to() from and into
// page-locked memory (Tensor::pin_memory; a download allocates its pinned output from the
// host caching allocator each call), and an upload from pageable memory (staged through a
// pinned block), each against cudaMemcpyAsync between cudaHostAlloc and cudaMalloc buffers.
void add_host_copies(std::vector<Result>& out, Device dev, int64_t n, int reps) {
  const std::string sz = std::to_string(n >> 20) + "M";
  const std::string baseline = "cudaMemcpyAsync, cudaHostAlloc memory, " + sz + " f32";
  const std::string up_pinned = "upload f32 " + sz + " pinned", up_pageable = "upload f32 " + sz + " pageable",
                    down_pinned = "download f32 " + sz + " pinned";
  const size_t bytes = size_t(n) * 4;
  const double gb = double(bytes) / 1e9;
  // A failure before the rows run is every row's.
  auto fail_all = [&](const std::exception& e) {
    for (const std::string& name : {up_pinned, up_pageable, down_pinned}) {
      Result r{"gpu", name, 0, "GB/s", 0, baseline, 0};
      r.error = e.what();
      out.push_back(std::move(r));
    }
  };
  auto sync_cuda = [] { cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); };
  double up_base = 0, down_base = 0;
  Tensor x, pinned, on_gpu;
  try {
    PinnedBuffer host(bytes);
    DeviceBuffer device(bytes);
    std::memset(host.p, 0, bytes);
    up_base = gb / time_device([&] {
      cuda_check(cudaMemcpyAsync(device.p, host.p, bytes, cudaMemcpyHostToDevice, nullptr), "cudaMemcpyAsync");
    }, sync_cuda, reps, 5).median_s;
    down_base = gb / time_device([&] {
      cuda_check(cudaMemcpyAsync(host.p, device.p, bytes, cudaMemcpyDeviceToHost, nullptr), "cudaMemcpyAsync");
    }, sync_cuda, reps, 5).median_s;
    x = random::uniform({n}, 21, 0.0, 1.0, kFloat32, Device());  // on the host, whatever the current device
    pinned = x.pin_memory();
    on_gpu = x.to(dev);
  } catch (const std::exception& e) {
    fail_all(e);
    return;
  }
  auto row = [&](const std::string& name, double base, const std::function<Tensor()>& copy) {
    Result r{"gpu", name, 0, "GB/s", 0, baseline, base};
    try {
      Tensor last;
      const Timing t = time_device([&] { last = copy(); }, [&] { synchronize(dev); }, reps, 5);
      r.value = gb / t.median_s;
      r.spread = t.spread();
      const Tensor head = last.slice(0, 0, 1024).to(Device());
      r.extra.push_back({"rel_err", rel_error(head.to_vector<float>(), x.slice(0, 0, 1024).to_vector<float>())});
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    out.push_back(std::move(r));
  };
  row(up_pinned, up_base, [&] { return pinned.to(dev, /*non_blocking=*/true); });
  row(up_pageable, up_base, [&] { return x.to(dev, /*non_blocking=*/true); });
  row(down_pinned, down_base, [&] { return on_gpu.to(Device(), /*non_blocking=*/true); });
}

// Steps/s of a loop that queues ~5 ms of products on the device (16 float32 2048^3) and
// takes the next batch of a prefetching distributed dataset (64 images 3x128x128, 12.6 MB),
// fetched by strata (InputOptions::experimental_fetch_to_device: an upload on the device's
// input stream, distribute/device_fetch.h), against the same loop with the fetch off and a
// blocking Tensor::to on the default stream, which waits for the queued products first.
void add_input_fetch(std::vector<Result>& out, Device dev, bool quick) {
  const int steps = quick ? 3 : 40;
  const int reps = quick ? 1 : 5;
  Result r{"gpu", "input fetch b64 3x128x128 behind ~5 ms of products, one_device(" + dev.str() + ")", 0, "steps/s",
           0, "fetch off, blocking Tensor::to on the default stream", 0};
  try {
    distribute::OneDeviceStrategy strategy(dev);
    const Tensor images = random::normal({64 * 4, 3, 128, 128}, 23, 0.0, 1.0, kFloat32, Device());
    const data::Dataset batches = data::Dataset::from_tensor_slices(images).batch(64).repeat();
    const Tensor a = random::normal({2048, 2048}, 24, 0.0, 1.0, kFloat32, Device()).to(dev);
    auto iterator = [&](bool fetch) {
      distribute::InputOptions options;
      options.experimental_fetch_to_device = fetch;
      return strategy.experimental_distribute_dataset(batches, options).make_iterator();
    };
    distribute::DistributedIterator fetching = iterator(true), host_side = iterator(false);
    auto loop = [&](distribute::DistributedIterator& it, bool fetch) {
      for (int i = 0; i < steps; ++i) {
        for (int k = 0; k < 16; ++k) (void)matmul(a, a);
        const Tensor batch = (*it.next())[0][0];
        (void)sum(fetch ? batch : batch.to(dev));
      }
      synchronize(dev);
    };
    auto fetched = [&] { loop(fetching, true); };
    auto blocking = [&] { loop(host_side, false); };
    fetched(), blocking();  // warm-up: allocator, cuBLAS, prefetch threads
    r.baseline_value = double(steps) / time_it(blocking, reps, 1, 1).median_s;
    const Timing t = time_it(fetched, reps, 1, 1);
    r.value = double(steps) / t.median_s;
    r.spread = t.spread();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  out.push_back(std::move(r));
}

void add_training(std::vector<Result>& out, Device dev, bool cnn, bool quick) {
  const int64_t batch = cnn ? 64 : 128;
  const int steps = quick ? 2 : (cnn ? 50 : 100);
  const int reps = quick ? 1 : 5;
  const std::string model = cnn ? "CNN b64" : "MLP 784-512-512-10 b128";
  Result r{"gpu", "train " + model + " one_device(" + dev.str() + ")", 0, "steps/s", 0,
           "default strategy on the CPU", 0};
  try {
    r.baseline_value = steps_per_second(distribute::DefaultStrategy::instance(), cnn, batch,
                                        quick ? 2 : (cnn ? 10 : 50), reps);
    distribute::OneDeviceStrategy strategy(dev);
    r.value = steps_per_second(strategy, cnn, batch, steps, reps);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  out.push_back(std::move(r));
}

// busbw = 2 (n - 1) / n x bytes / time (nccl-tests' definition; n = 2 replicas), through
// ReplicaContext::all_reduce as a training step calls it (a replica's values are packed
// into one buffer first, which is part of the time).
void add_virtual_allreduce(std::vector<Result>& out, Device dev, int64_t bytes, int reps) {
  const std::string sz = bytes >= (int64_t(1) << 20) ? std::to_string(bytes >> 20) + " MB" : std::to_string(bytes) + " B";
  Result r{"gpu", "all_reduce 2 logical replicas of " + dev.str() + ", " + sz, 0, "GB/s busbw", 0,
           "cudaMemcpy device to device, " + sz, 0};
  try {
    const int64_t n = bytes / 4;
    const size_t nbytes = static_cast<size_t>(bytes);
    auto sync_cuda = [] { cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); };
    {
      DeviceBuffer src(nbytes), dst(nbytes);
      cuda_check(cudaMemset(src.p, 0x3f, nbytes), "cudaMemset");
      const Timing tc = time_device([&] {
        cuda_check(cudaMemcpyAsync(dst.p, src.p, nbytes, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpy");
      }, sync_cuda, reps, 10);
      r.baseline_value = double(bytes) / tc.median_s / 1e9;
    }
    distribute::MirroredStrategy strategy({dev, dev});
    const std::vector<Tensor> values = {random::normal({n}, 21).to(dev), random::normal({n}, 22).to(dev)};
    auto step = [&] {
      strategy.run([&] {
        distribute::ReplicaContext* ctx = distribute::get_replica_context();
        return ctx->all_reduce(distribute::ReduceOp::Sum, values[size_t(ctx->replica_id_in_sync_group())]);
      });
    };
    const Timing ts = time_device(step, [&] { synchronize(dev); }, reps, 5);
    r.value = double(bytes) / ts.median_s / 1e9;  // 2 (n - 1) / n = 1 for n = 2
    r.spread = ts.spread();
    r.note = std::string("cross-device ops ") + distribute::cross_device_ops_name(strategy.cross_device_ops());
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  out.push_back(std::move(r));
}

}  // namespace

std::vector<Result> gpu_suite(const Options& o) {
  const Device dev = Device::parse(o.device);
  STRATA_CHECK(dev.is_cuda(), "gpu suite: --device must name a CUDA device, got ", dev);
  StreamBackend* backend = stream_backend(DeviceType::CUDA);
  const int count = backend ? backend->device_count() : 0;
  STRATA_CHECK(dev.index < count, "gpu suite: ", dev, " is not present (", count, " CUDA device(s))");
  cuda_check(cudaSetDevice(dev.index), "cudaSetDevice");
  std::vector<Result> out;
  const int reps = o.quick ? 2 : 7;
  Cublas blas;
  for (int64_t n : o.quick ? std::vector<int64_t>{1024} : std::vector<int64_t>{4096, 8192}) {
    add_matmul(out, dev, blas, n, kFloat32, reps);
    add_matmul(out, dev, blas, n, kBFloat16, reps);
  }
  add_elementwise(out, dev, o.quick ? (int64_t(1) << 24) : (int64_t(256) << 20), reps);
  add_host_copies(out, dev, o.quick ? (int64_t(1) << 22) : (int64_t(64) << 20), reps);
  add_input_fetch(out, dev, o.quick);
  add_training(out, dev, false, o.quick);
  add_training(out, dev, true, o.quick);
  for (int64_t bytes : o.quick ? std::vector<int64_t>{int64_t(1) << 20} : std::vector<int64_t>{int64_t(1) << 20, int64_t(64) << 20}) {
    add_virtual_allreduce(out, dev, bytes, reps);
  }
  return out;
}

#endif

}  // namespace strata::bench
