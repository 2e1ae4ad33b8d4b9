// CPU kernels of softmax, log-softmax, sparse softmax cross-entropy and layer norm. All
// subtract the row maximum first, so large logits never overflow.
#include <cmath>
#include <limits>

#include <Eigen/Core>

#include <strata/core/data_error.h>
#include <strata/core/dispatch.h>
#include <strata/kernels/cpu/flushed_exp.h>
#include <strata/kernels/cpu/loops.h>

namespace strata::cpu_kernels {

namespace {

// Runs row_fn(in_row, out_row, n, scratch) over rows of `axis` (moved last), writing into
// out. `scratch` holds n floats of compute type, allocated once per worker chunk.
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
  parallel_for(outer, double(n) * 4.0, [&](int64_t b, int64_t e) {
    std::vector<C> scratch(is_half_v<T> ? static_cast<size_t>(n) : 0);
    for (int64_t i = b; i < e; ++i) row_fn(p + i * n, r + i * n, n, scratch.data());
  });
  if (!direct) {
    const Tensor in[1] = {result};
    const Tensor o[1] = {permuted_view(out, perm)};
    run_kernel(OpId::Copy, OpAttrs{}, in, o);
  }
}

template <typename C>
using RowArray = Eigen::Array<C, Eigen::Dynamic, 1>;

// Row maximum, with an all -inf row shifted by 0 rather than -inf (avoids inf - inf).
template <typename C>
C row_shift(const Eigen::Map<const RowArray<C>>& x) {
  const C m = x.maxCoeff();
  return std::isinf(m) && m < 0 ? C(0) : m;
}

// e^(x - m), vectorised, flushed to 0 below the smallest normal (kernels/cpu/flushed_exp.h).
template <typename C, typename X>
auto shifted_exp(const X& x, C m) {
  return flushed_exp<C>(x - m);
}

// One row of softmax or log-softmax in compute type C: a max pass, a fused exp-and-sum
// pass (softmax writes e^(x-m) as it sums), and a scaling pass over the row, now in cache.
template <typename C>
void softmax_row_compute(const C* in, C* out, int64_t n, bool log_space) {
  const Eigen::Map<const RowArray<C>> x(in, n);
  Eigen::Map<RowArray<C>> y(out, n);
  const C m = row_shift(x);
  if (log_space) {
    const C log_sum = std::log(shifted_exp(x, m).sum());
    y = (x - m) - log_sum;
  } else {
    y = shifted_exp(x, m);
    y *= C(1) / y.sum();
  }
}

template <typename T>
void softmax_row(const T* in, T* out, int64_t n, compute_t<T>* scratch, bool log_space) {
  if (n == 0) return;
  if constexpr (is_half_v<T>) {
    // float16/bfloat16 rows compute in float32 in the scratch row, rounded once at the end.
    for (int64_t j = 0; j < n; ++j) scratch[j] = float(in[j]);
    softmax_row_compute<float>(scratch, scratch, n, log_space);
    for (int64_t j = 0; j < n; ++j) out[j] = convert<T>(scratch[j]);
  } else {
    softmax_row_compute<T>(in, out, n, log_space);
  }
}

void softmax_kernel(const KernelArgs& k) {
  const bool log_space = k.op == OpId::LogSoftmax;
  visit_dtype(k.in[0].dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      over_rows<T>(k.in[0], k.attrs.axis, k.out[0], [&](const T* in, T* out, int64_t n, compute_t<T>* scratch) {
        softmax_row(in, out, n, scratch, log_space);
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
      parallel_for(n, double(classes) * 3.0, [&](int64_t b, int64_t e) {
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
          const Eigen::Map<const RowArray<C>> x(row, classes);
          const C m = row_shift(x);
          const C log_sum = std::log(shifted_exp(x, m).sum());
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
