// CPU kernels of softmax, log-softmax, sparse softmax cross-entropy and layer norm. All
// subtract the row maximum first, so large logits never overflow. float32 rows (and the
// float32 compute of float16/bfloat16 rows) go through kernels/cpu/vec_math.h; float64
// rows through Eigen.
#include <cmath>
#include <limits>

#include <Eigen/Core>

#include <strata/core/data_error.h>
#include <strata/core/dispatch.h>
#include <strata/kernels/cpu/flushed_exp.h>
#include <strata/kernels/cpu/loops.h>
#include <strata/kernels/cpu/vec_math.h>

namespace strata::cpu_kernels {

namespace {

// Estimated cost of a softmax row per element (ns), for parallel_for: the vectorised
// float32 passes take ~0.3-0.5 ns an element on one core here, Eigen's float64 ones more.
template <typename T>
constexpr double kRowCost = std::is_same_v<compute_t<T>, float> ? 1.0 : 4.0;

// Rows up to this many bytes get the next row's pointers, to prefetch (vec::RowAhead): the
// next row's input and output then fit in L1 (32 KiB here) beside the current one's.
constexpr int64_t kPrefetchRowBytes = 8 << 10;

// Runs row_fn(in_row, out_row, n, scratch, next_in, next_out) over rows of `axis` (moved
// last), writing into out. `scratch` holds n floats of compute type, allocated once per
// worker chunk. next_in and next_out are the following row's, to prefetch, or null (the
// chunk's last row, rows over kPrefetchRowBytes).
template <typename T, typename RowFn>
void over_rows(const Tensor& x, int64_t axis, const Tensor& out, RowFn row_fn) {
  using C = compute_t<T>;
  const int64_t n = x.shape()[size_t(axis)];
  const bool direct = axis == x.ndim() - 1 && x.is_contiguous();
  const auto perm = axis_last_perm(x.ndim(), axis);
  const Tensor rows = direct ? x : contiguous_copy(permuted_view(x, perm));
  const Tensor result = direct ? out : Tensor::empty(rows.shape(), out.dtype(), out.device());
  const T* p = ptr<T>(rows);
  T* r = ptr<T>(result);
  const int64_t outer = n ? rows.numel() / n : 0;
  parallel_for(outer, double(n) * kRowCost<T>, [&](int64_t b, int64_t e) {
    std::vector<C> scratch(is_half_v<T> ? static_cast<size_t>(n) : 0);
    const bool ahead = int64_t(sizeof(T)) * n <= kPrefetchRowBytes;
    for (int64_t i = b; i < e; ++i) {
      const bool next = ahead && i + 1 < e;
      row_fn(p + i * n, r + i * n, n, scratch.data(), next ? p + (i + 1) * n : nullptr,
             next ? r + (i + 1) * n : nullptr);
    }
  });
  if (!direct) {
    const Tensor in[1] = {result};
    const Tensor o[1] = {permuted_view(out, perm)};
    run_kernel(OpId::Copy, OpAttrs{}, in, o);
  }
}

template <typename C>
using RowArray = Eigen::Array<C, Eigen::Dynamic, 1>;

// The shift of a row whose maximum is m: m itself, except 0 for an all -inf row (avoids
// -inf - -inf). A NaN anywhere in the row reaches every output through the row's sum.
template <typename C>
C row_shift(C m) {
  return std::isinf(m) && m < 0 ? C(0) : m;
}

// The passes over a row in compute type C: float32 through kernels/cpu/vec_math.h, float64
// through Eigen (vectorised, flushed to 0 below the smallest normal as float32 is:
// kernels/cpu/flushed_exp.h).
float row_max(const float* x, int64_t n) { return vec::functions().max(x, n); }
double row_max(const double* x, int64_t n) { return Eigen::Map<const RowArray<double>>(x, n).maxCoeff(); }

// The sum of e^(x - m), each term also written to out unless out is null (out may be x).
float exp_sum(const float* x, float m, float* out, int64_t n, vec::RowAhead ahead = {}) {
  return vec::functions().exp_sum(x, m, out, n, ahead);
}
double exp_sum(const double* x, double m, double* out, int64_t n, vec::RowAhead = {}) {
  const auto e = flushed_exp<double>(Eigen::Map<const RowArray<double>>(x, n) - m);
  if (!out) return e.sum();
  Eigen::Map<RowArray<double>> y(out, n);
  y = e;
  return y.sum();
}

void scale(float* x, float s, int64_t n) { vec::functions().scale(x, s, n); }
void scale(double* x, double s, int64_t n) { Eigen::Map<RowArray<double>>(x, n) *= s; }

// One row of softmax or log-softmax: a max pass, a fused exp-and-sum pass (softmax writes
// e^(x-m) as it sums), and a pass over the row, now in cache (a 1024-float row is 4 KB of
// L1): scaling by 1/sum, or subtracting m + log(sum). in may be out. The exp-and-sum pass
// prefetches `ahead` (the next row, float32).
template <typename C>
void softmax_row_compute(const C* in, C* out, int64_t n, bool log_space, vec::RowAhead ahead) {
  const C m = row_shift(row_max(in, n));
  if (log_space) {
    const C log_sum = std::log(exp_sum(in, m, nullptr, n, ahead));
    for (int64_t j = 0; j < n; ++j) out[j] = (in[j] - m) - log_sum;
  } else {
    scale(out, C(1) / exp_sum(in, m, out, n, ahead), n);
  }
}

template <typename T>
void softmax_row(const T* in, T* out, int64_t n, compute_t<T>* scratch, bool log_space, const T* next_in,
                 T* next_out) {
  if (n == 0) return;
  if constexpr (is_half_v<T>) {
    // float16/bfloat16 rows compute in float32 in the scratch row, rounded once at the end.
    for (int64_t j = 0; j < n; ++j) scratch[j] = float(in[j]);
    softmax_row_compute(scratch, scratch, n, log_space, {});
    for (int64_t j = 0; j < n; ++j) out[j] = convert<T>(scratch[j]);
  } else if constexpr (std::is_same_v<T, float>) {
    softmax_row_compute(in, out, n, log_space, {next_in, next_out});
  } else {
    softmax_row_compute(in, out, n, log_space, {});
  }
}

void softmax_kernel(const KernelArgs& k) {
  const bool log_space = k.op == OpId::LogSoftmax;
  visit_dtype(k.in[0].dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      over_rows<T>(k.in[0], k.attrs.axis, k.out[0], [&](const T* in, T* out, int64_t n, compute_t<T>* scratch,
                                                          const T* next_in, T* next_out) {
        softmax_row(in, out, n, scratch, log_space, next_in, next_out);
      });
    }
  });
}

// Sparse softmax cross-entropy per row: logsumexp(row) - row[label], fused into a max pass
// and an exp-and-sum pass (no probabilities are written).
void xent_kernel(const KernelArgs& k) {
  const Tensor logits = contiguous_copy(k.in[0]);
  const Tensor labels = contiguous_copy(k.in[1]);
  const int64_t n = logits.dim(0), classes = logits.dim(1);
  std::vector<int64_t> lab(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    lab[size_t(i)] = labels.dtype() == kInt64 ? ptr<int64_t>(labels)[i] : ptr<int32_t>(labels)[i];
    if (lab[size_t(i)] < 0 || lab[size_t(i)] >= classes) {
      // The same data error the other backends defer (core/data_error.h).
      raise_data_error(DataError{DataErrorKind::LabelOutOfRange, OpId::SparseSoftmaxCrossEntropy,
                                 lab[size_t(i)], i, classes, 0});
    }
  }
  visit_dtype(logits.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      using C = compute_t<T>;
      const T* p = ptr<T>(logits);
      T* o = ptr<T>(k.out[0]);
      parallel_for(n, double(classes) * kRowCost<T>, [&](int64_t b, int64_t e) {
        std::vector<C> scratch(is_half_v<T> ? static_cast<size_t>(classes) : 0);
        for (int64_t i = b; i < e; ++i) {
          const C* row;
          if constexpr (is_half_v<T>) {
            for (int64_t j = 0; j < classes; ++j) scratch[size_t(j)] = float(p[i * classes + j]);
            row = scratch.data();
          } else {
            row = p + i * classes;
          }
          if (classes == 0) continue;
          const C m = row_shift(row_max(row, classes));
          vec::RowAhead ahead;
          if constexpr (std::is_same_v<T, float>) {
            if (i + 1 < e && classes * int64_t(sizeof(T)) <= kPrefetchRowBytes) ahead.in = row + classes;
          }
          const C log_sum = std::log(exp_sum(row, m, nullptr, classes, ahead));
          o[i] = convert<T>(C((m - row[lab[size_t(i)]]) + log_sum));
        }
      });
    }
  });
}

void layer_norm_kernel(const KernelArgs& k) {
  const Tensor x = contiguous_copy(k.in[0]);
  const Tensor gamma = contiguous_copy(k.in[1]);
  const Tensor beta = contiguous_copy(k.in[2]);
  const double eps = k.attrs.get<LayerNormAttrs>(k.op).epsilon;
  const int64_t d = x.dim(-1);
  const int64_t rows = d ? x.numel() / d : 0;
  visit_dtype(x.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      using C = compute_t<T>;
      const T* p = ptr<T>(x);
      const T* g = ptr<T>(gamma);
      const T* b = ptr<T>(beta);
      T* o = ptr<T>(k.out[0]);
      parallel_for(rows, double(d) * 3.0, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const T* row = p + r * d;
          double mean = 0, var = 0;
          for (int64_t j = 0; j < d; ++j) mean += double(C(row[j]));
          mean /= double(d);
          for (int64_t j = 0; j < d; ++j) {
            const double c = double(C(row[j])) - mean;
            var += c * c;
          }
          var /= double(d);
          const double rstd = 1.0 / std::sqrt(var + eps);
          for (int64_t j = 0; j < d; ++j) {
            o[r * d + j] = convert<T>(C((double(C(row[j])) - mean) * rstd * double(C(g[j])) + double(C(b[j]))));
          }
        }
      });
    }
  });
}

}  // namespace

void register_nn_kernels() {
  register_kernel(OpId::Softmax, DeviceType::CPU, softmax_kernel);
  register_kernel(OpId::LogSoftmax, DeviceType::CPU, softmax_kernel);
  register_kernel(OpId::SparseSoftmaxCrossEntropy, DeviceType::CPU, xent_kernel);
  register_kernel(OpId::LayerNorm, DeviceType::CPU, layer_norm_kernel);
}

}  // namespace strata::cpu_kernels
