// CUDA kernels of softmax, log-softmax, sparse softmax cross-entropy and layer norm: one
// fused kernel each, a group of 32..256 threads per row (several rows per block when rows
// are short; reduce.cuh's row machinery), reading the row again for each of its passes.
//
// Results match kernels/cpu/nn.cc: the row maximum is subtracted first (an all -inf row
// uses 0 for softmax), exponentials and their sums are float64, softmax is exp(x - m) /
// sum, log-softmax (x - m) - log(sum), cross-entropy m + log(sum) - x[label], layer norm
// (x - mean) * rstd * gamma + beta with mean and variance (two passes) in float64. Sums run
// as a tree rather than in sequence, which shows only in the last bits of float64 results.
// Softmax along an axis other than the last runs one thread per (outer, inner) line, in
// the CPU's order.
//
// An out-of-range label is not thrown from the kernel: block 0 of the cross-entropy launch
// finds the first one (the smallest position, the one the CPU reports) and records it in
// the device's data-error record (launch.h record_data_error); the next synchronisation
// raises the CPU's message. The loss of a row with a bad label is NaN.
#pragma once

#include <strata/kernels/cuda/reduce.cuh>

namespace strata::cuda_kernels {

// ---- device code ----

// Softmax / log-softmax of rows of n elements (threadIdx.y: the row group of a block).
template <typename T>
__global__ void softmax_rows_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t rows, int64_t n,
                                    bool log_space) {
  using C = compute_t<T>;
  __shared__ C smem_c[kMaxWarps];
  __shared__ double smem_d[kMaxWarps];
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < rows; base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    const bool valid = row < rows;
    const T* x = in + row * n;
    C m = C(-INFINITY);
    if (valid) {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = reduce_detail::combine(ReduceCode::Max, m, load(x[j]));
    }
    m = group_allreduce(ReduceCode::Max, m, smem_c);
    if (m == C(-INFINITY)) m = C(0);  // all -inf: avoid inf - inf
    double s = 0;
    if (valid) {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += dmath::exp(double(load(x[j]) - m));
    }
    s = group_allreduce(ReduceCode::Sum, s, smem_d);
    if (!valid) continue;
    T* y = out + row * n;
    if (log_space) {
      const double ls = dmath::log(s);
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) y[j] = store<T>(C(double(load(x[j]) - m) - ls));
    } else {
      const double inv = 1.0 / s;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        y[j] = store<T>(C(dmath::exp(double(load(x[j]) - m)) * inv));
      }
    }
  }
}

// Softmax / log-softmax along the middle axis of [outer, n, inner]: a thread per line.
template <typename T>
__global__ void softmax_lines_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t outer, int64_t n,
                                     int64_t inner, bool log_space) {
  using C = compute_t<T>;
  const int64_t lines = outer * inner;
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < lines;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (j / inner) * n * inner + j % inner;
    const T* x = in + base;
    T* y = out + base;
    C m = load(x[0]);
    for (int64_t r = 1; r < n; ++r) {
      const C v = load(x[r * inner]);
      m = m < v ? v : m;  // std::max, as the CPU
    }
    if (m == C(-INFINITY)) m = C(0);
    double s = 0;
    for (int64_t r = 0; r < n; ++r) s += dmath::exp(double(load(x[r * inner]) - m));
    const double ls = dmath::log(s), inv = 1.0 / s;
    for (int64_t r = 0; r < n; ++r) {
      const double b = double(load(x[r * inner]) - m);
      y[r * inner] = store<T>(log_space ? C(b - ls) : C(dmath::exp(b) * inv));
    }
  }
}

// Run by every thread of block 0: records the first label outside [0, classes).
template <typename L>
__device__ void check_labels_block(const L* labels, int64_t rows, int64_t classes, DataError* error) {
  __shared__ int64_t first[cuda_backend::kBlockThreads];
  const unsigned t = threadIdx.x + blockDim.x * threadIdx.y, threads = blockDim.x * blockDim.y;
  int64_t mine = rows;  // none
  for (int64_t j = t; j < rows; j += threads) {
    if (labels[j] < 0 || int64_t(labels[j]) >= classes) {
      mine = j;  // the first of this thread's positions
      break;
    }
  }
  first[t] = mine;
  __syncthreads();
  if (t == 0) {
    for (unsigned k = 1; k < threads; ++k) mine = first[k] < mine ? first[k] : mine;
    if (mine < rows) {
      cuda_backend::record_data_error(error, DataErrorKind::LabelOutOfRange, OpId::SparseSoftmaxCrossEntropy,
                                      int64_t(labels[mine]), mine, classes, 0);
    }
  }
}

// Cross-entropy of rows of `classes` logits against integer labels L.
template <typename T, typename L>
__global__ void sparse_xent_kernel(const T* __restrict__ logits, const L* __restrict__ labels, T* __restrict__ out,
                                   int64_t rows, int64_t classes, DataError* error) {
  using C = compute_t<T>;
  __shared__ C smem_c[kMaxWarps];
  __shared__ double smem_d[kMaxWarps];
  if (blockIdx.x == 0) check_labels_block(labels, rows, classes, error);
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < rows; base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    const bool valid = row < rows;
    const T* x = logits + row * classes;
    C m = C(-INFINITY);
    if (valid) {
      for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
        m = reduce_detail::combine(ReduceCode::Max, m, load(x[j]));
      }
    }
    m = group_allreduce(ReduceCode::Max, m, smem_c);
    double s = 0;
    if (valid) {
      for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) s += dmath::exp(double(load(x[j]) - m));
    }
    s = group_allreduce(ReduceCode::Sum, s, smem_d);
    if (!valid || threadIdx.x != 0) continue;
    const int64_t label = int64_t(labels[row]);
    if (label < 0 || label >= classes) {
      out[row] = store<T>(C(NAN));  // block 0 records the error
    } else {
      out[row] = store<T>(C(double(m) + dmath::log(s) - double(load(x[label]))));
    }
  }
}

// Layer norm over the last axis (rows of d elements).
template <typename T>
__global__ void layer_norm_kernel(const T* __restrict__ in, const T* __restrict__ gamma,
                                  const T* __restrict__ beta, T* __restrict__ out, int64_t rows, int64_t d,
                                  double eps) {
  using C = compute_t<T>;
  __shared__ double smem[kMaxWarps];
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < rows; base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    const bool valid = row < rows;
    const T* x = in + row * d;
    double s = 0;
    if (valid) {
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += double(load(x[j]));
    }
    const double mean = group_allreduce(ReduceCode::Sum, s, smem) / double(d);
    double v = 0;
    if (valid) {
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        const double c = double(load(x[j])) - mean;
        v += c * c;
      }
    }
    const double var = group_allreduce(ReduceCode::Sum, v, smem) / double(d);
    if (!valid) continue;
    const double rstd = 1.0 / dmath::sqrt(var + eps);
    T* y = out + row * d;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      y[j] = store<T>(C((double(load(x[j])) - mean) * rstd * double(load(gamma[j])) + double(load(beta[j]))));
    }
  }
}

// ---- host launchers (KernelFn) ----

inline void cuda_softmax(const KernelArgs& k) {
  const Tensor& out = k.out[0];
  const char* op = op_name(k.op);
  STRATA_CHECK(!on_host(k.in[0]), op, ": the CUDA kernel got a host input");
  if (out.numel() == 0) return;
  STRATA_CHECK(out.is_contiguous(), op, ": the CUDA kernel writes contiguous outputs");
  const bool log_space = k.op == OpId::LogSoftmax;
  const Tensor x = reduce_detail::contiguous_on(k.in[0], k.stream);
  const AxisLayout l = axis_layout(x.shape(), k.attrs.axis);
  visit_device_dtype(x.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (!is_float_v<T>) {
      fail(op, ": no CUDA kernel for dtype ", x.dtype());
    } else {
      const T* in = static_cast<const T*>(x.raw_data());
      if (l.inner == 1) {
        const RowGroups g = row_groups(l.outer, l.n);
        return cuda_backend::launch(op, softmax_rows_kernel<T>, g.grid, g.block, 0, k.stream, in, out_ptr<T>(out),
                                    l.outer, l.n, log_space);
      }
      const int64_t lines = l.outer * l.inner;
      const RowGroups g = row_groups(1, lines);
      cuda_backend::launch(op, softmax_lines_kernel<T>, dim3(cuda_backend::grid_for(lines, g.block.x)), g.block, 0,
                           k.stream, in, out_ptr<T>(out), l.outer, l.n, l.inner, log_space);
    }
  });
}

inline void cuda_sparse_xent(const KernelArgs& k) {
  const Tensor& out = k.out[0];
  const char* op = op_name(k.op);
  STRATA_CHECK(!on_host(k.in[0]) && !on_host(k.in[1]), op, ": the CUDA kernel got a host input");
  if (out.numel() == 0) return;
  STRATA_CHECK(out.is_contiguous(), op, ": the CUDA kernel writes contiguous outputs");
  const Tensor logits = reduce_detail::contiguous_on(k.in[0], k.stream);
  const Tensor labels = reduce_detail::contiguous_on(k.in[1], k.stream);
  const int64_t rows = logits.dim(0), classes = logits.dim(1);
  DataError* error = cuda_backend::device_data_error(out.device().index);
  const RowGroups g = row_groups(rows, classes);
  visit_device_dtype(logits.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (!is_float_v<T>) {
      fail(op, ": no CUDA kernel for dtype ", logits.dtype());
    } else {
      const T* x = static_cast<const T*>(logits.raw_data());
      if (labels.dtype() == kInt64) {
        return cuda_backend::launch(op, sparse_xent_kernel<T, int64_t>, g.grid, g.block, 0, k.stream, x,
                                    static_cast<const int64_t*>(labels.raw_data()), out_ptr<T>(out), rows, classes,
                                    error);
      }
      STRATA_CHECK(labels.dtype() == kInt32, op, ": labels must be int32 or int64, got ", labels.dtype());
      cuda_backend::launch(op, sparse_xent_kernel<T, int32_t>, g.grid, g.block, 0, k.stream, x,
                           static_cast<const int32_t*>(labels.raw_data()), out_ptr<T>(out), rows, classes, error);
    }
  });
}

inline void cuda_layer_norm(const KernelArgs& k) {
  const Tensor& out = k.out[0];
  const char* op = op_name(k.op);
  STRATA_CHECK(!on_host(k.in[0]) && !on_host(k.in[1]) && !on_host(k.in[2]), op,
               ": the CUDA kernel got a host input");
  if (out.numel() == 0) return;
  STRATA_CHECK(out.is_contiguous(), op, ": the CUDA kernel writes contiguous outputs");
  const double eps = k.attrs.get<LayerNormAttrs>(k.op).epsilon;
  const Tensor x = reduce_detail::contiguous_on(k.in[0], k.stream);
  const Tensor gamma = reduce_detail::contiguous_on(k.in[1], k.stream);
  const Tensor beta = reduce_detail::contiguous_on(k.in[2], k.stream);
  const int64_t d = x.dim(-1), rows = x.numel() / d;
  const RowGroups g = row_groups(rows, d);
  visit_device_dtype(x.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (!is_float_v<T>) {
      fail(op, ": no CUDA kernel for dtype ", x.dtype());
    } else {
      cuda_backend::launch(op, layer_norm_kernel<T>, g.grid, g.block, 0, k.stream,
                           static_cast<const T*>(x.raw_data()), static_cast<const T*>(gamma.raw_data()),
                           static_cast<const T*>(beta.raw_data()), out_ptr<T>(out), rows, d, eps);
    }
  });
}

// Registers the family for DeviceType::CUDA (called by the backend's init, or by the
// emulation tests' registration).
inline void register_nn_kernels() {
  register_kernel(OpId::Softmax, DeviceType::CUDA, cuda_softmax);
  register_kernel(OpId::LogSoftmax, DeviceType::CUDA, cuda_softmax);
  register_kernel(OpId::SparseSoftmaxCrossEntropy, DeviceType::CUDA, cuda_sparse_xent);
  register_kernel(OpId::LayerNorm, DeviceType::CUDA, cuda_layer_norm);
}

}  // namespace strata::cuda_kernels
