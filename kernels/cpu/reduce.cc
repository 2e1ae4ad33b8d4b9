// CPU kernels of reductions (sum, max, min, prod, logsumexp), arg-reductions and cumsum.
//
// Every reduction is brought to one of two layouts: rows (the reduced elements of each
// output are contiguous) or columns (the reduced axes lead a contiguous tensor, as when
// summing a bias gradient over the batch). Other axis sets are first permuted into rows.
// float32 sums add 128-element vectorised blocks into a float64 accumulator, which keeps
// large sums accurate (error independent of length in practice) at full speed.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>

#include <strata/core/contiguous.h>
#include <strata/core/dispatch.h>
#include <strata/kernels/cpu/loops.h>

namespace strata::cpu_kernels {

Tensor contiguous_copy(const Tensor& t) { return contiguous_untaped(t); }

namespace {

template <typename T>
using acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, int64_t>;

template <typename T>
double row_sum_float(const T* p, int64_t n) {
  using C = compute_t<T>;
  double acc = 0;
  if constexpr (std::is_same_v<C, T>) {
    constexpr int64_t kChunk = 128;
    int64_t i = 0;
    for (; i + kChunk <= n; i += kChunk) acc += double(Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>(p + i, kChunk).sum());
    for (; i < n; ++i) acc += double(p[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) acc += double(float(p[i]));
  }
  return acc;
}

template <typename T>
compute_t<T> reduce_row(OpId op, const T* p, int64_t n) {
  using C = compute_t<T>;
  switch (op) {
    case OpId::Sum:
      if constexpr (std::is_floating_point_v<C>) {
        return C(row_sum_float(p, n));
      } else {
        acc_t<T> s = 0;
        for (int64_t i = 0; i < n; ++i) s += p[i];
        return C(s);
      }
    case OpId::Prod: {
      C s = C(1);
      for (int64_t i = 0; i < n; ++i) s *= C(p[i]);
      return s;
    }
    case OpId::Max:
    case OpId::Min: {
      C best = C(p[0]);
      for (int64_t i = 1; i < n; ++i) {
        const C v = C(p[i]);
        if (v != v) return v;  // NaN propagates
        if (op == OpId::Max ? v > best : v < best) best = v;
      }
      return best;
    }
    case OpId::LogSumExp:
      if constexpr (std::is_floating_point_v<C>) {
        C m = C(p[0]);
        for (int64_t i = 1; i < n; ++i) {
          const C v = C(p[i]);
          if (v != v) return v;
          if (v > m) m = v;
        }
        if (std::isinf(m)) return m;
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += std::exp(double(C(p[i]) - m));
        return C(double(m) + std::log(s));
      }
      break;
    default: break;
  }
  fail(op_name(op), ": no CPU kernel for this dtype");
}

// Column sums over fewer columns than kColumnSplitMin are split by rows, in blocks of about
// kColumnBlockElements elements, at most kMaxColumnBlocks of them (bounding the partials).
constexpr int64_t kColumnSplitMin = 4096;
constexpr int64_t kColumnBlockElements = int64_t(1) << 16;
constexpr int64_t kMaxColumnBlocks = 64;

template <typename T>
void reduce_typed(OpId op, const Tensor& x, const std::vector<int64_t>& axes, const Tensor& out) {
  using C = compute_t<T>;
  const int64_t rank = x.ndim();
  int64_t reduced = 1;
  for (int64_t a : axes) reduced *= x.shape()[size_t(a)];
  const int64_t outer = out.numel();
  T* o = ptr<T>(out);
  if (reduced == 0) {  // sums of nothing are 0, products 1
    const C id = op == OpId::Prod ? C(1) : C(0);
    for (int64_t i = 0; i < outer; ++i) o[i] = convert<T>(id);
    return;
  }
  bool is_prefix = !axes.empty() && x.is_contiguous();
  for (size_t i = 0; i < axes.size() && is_prefix; ++i) is_prefix = axes[i] == int64_t(i);
  if (is_prefix && op == OpId::Sum && outer > 1 && outer < kColumnSplitMin) {
    // Column layout with few columns (a bias gradient: 32-512 columns over the batch's
    // pixels): split by rows. Split by columns, each thread would stream every row for a
    // few of its cache lines (at 2 threads the conv bias gradients took 4% of the MNIST CNN
    // step instead of 1.35% at one). Fixed blocks of rows each sum into a partial row, and
    // the partials are added in block order: the same result at any thread count.
    const T* p = ptr<T>(x);
    const int64_t blocks =
        std::clamp<int64_t>(reduced * outer / kColumnBlockElements, 1, std::min<int64_t>(reduced, kMaxColumnBlocks));
    const int64_t per_block = (reduced + blocks - 1) / blocks;
    const int64_t used = (reduced + per_block - 1) / per_block;  // none empty
    std::vector<acc_t<T>> partial(size_t(used * outer));
    parallel_for(used, double(per_block * outer) * 0.25, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk) {
        acc_t<T>* __restrict acc = partial.data() + blk * outer;
        const int64_t r0 = blk * per_block, r1 = std::min(reduced, r0 + per_block);
        // The block's first row initialises it (a column of -0.0 sums to -0.0, as in NumPy).
        for (int64_t j = 0; j < outer; ++j) acc[j] = acc_t<T>(C(p[r0 * outer + j]));
        for (int64_t r = r0 + 1; r < r1; ++r) {
          const T* __restrict row = p + r * outer;
          for (int64_t j = 0; j < outer; ++j) acc[j] += acc_t<T>(C(row[j]));
        }
      }
    });
    for (int64_t blk = 1; blk < used; ++blk) {
      const acc_t<T>* src = partial.data() + blk * outer;
      for (int64_t j = 0; j < outer; ++j) partial[size_t(j)] += src[j];
    }
    for (int64_t j = 0; j < outer; ++j) o[j] = convert<T>(C(partial[size_t(j)]));
    return;
  }
  if (is_prefix && (op == OpId::Sum || op == OpId::Max || op == OpId::Min) && outer > 1) {
    // Column layout: accumulate whole rows into the output, the columns split across the pool.
    const T* p = ptr<T>(x);
    parallel_for(outer, double(reduced) * 0.5, [&](int64_t b, int64_t e) {
      std::vector<acc_t<T>> acc(size_t(e - b));
      for (int64_t j = b; j < e; ++j) acc[size_t(j - b)] = acc_t<T>(C(p[j]));
      for (int64_t r = 1; r < reduced; ++r) {
        const T* row = p + r * outer;
        for (int64_t j = b; j < e; ++j) {
          const acc_t<T> v = acc_t<T>(C(row[j]));
          auto& a = acc[size_t(j - b)];
          if (op == OpId::Sum) {
            a += v;
          } else if (v != v || (op == OpId::Max ? v > a : v < a)) {
            if (a == a) a = v;
          }
        }
      }
      for (int64_t j = b; j < e; ++j) o[j] = convert<T>(C(acc[size_t(j - b)]));
    });
    return;
  }
  // Row layout: kept axes first, reduced axes last, contiguous.
  std::vector<int64_t> perm;
  {
    size_t k = 0;
    for (int64_t i = 0; i < rank; ++i) {
      if (k < axes.size() && axes[k] == i) {
        ++k;
      } else {
        perm.push_back(i);
      }
    }
    perm.insert(perm.end(), axes.begin(), axes.end());
  }
  const Tensor rows = contiguous_copy(permuted_view(x, perm));
  const T* p = ptr<T>(rows);
  parallel_for(outer, double(reduced) * 0.5, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) o[i] = convert<T>(reduce_row(op, p + i * reduced, reduced));
  });
}

void reduce_kernel(const KernelArgs& k) {
  visit_dtype(k.in[0].dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (!std::is_same_v<T, bool>) reduce_typed<T>(k.op, k.in[0], k.attrs.axes, k.out[0]);
  });
}

void arg_reduce_kernel(const KernelArgs& k) {
  const Tensor& x = k.in[0];
  const int64_t axis = k.attrs.axis;
  const int64_t n = x.shape()[size_t(axis)];
  const bool want_max = k.op == OpId::ArgMax;
  int64_t* o = ptr<int64_t>(k.out[0]);
  visit_dtype(x.dtype(), [&](auto z) {
    using T = decltype(z);
    using C = std::conditional_t<std::is_same_v<T, bool>, int, compute_t<T>>;
    const Tensor rows = contiguous_copy(permuted_view(x, axis_last_perm(x.ndim(), axis)));
    const T* p = ptr<T>(rows);
    const int64_t outer = n ? rows.numel() / n : 0;
    parallel_for(outer, double(n), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const T* r = p + i * n;
        int64_t best = 0;
        C bv = C(r[0]);
        for (int64_t j = 1; j < n && bv == bv; ++j) {
          const C v = C(r[j]);
          if (v != v || (want_max ? v > bv : v < bv)) {
            bv = v;
            best = j;
          }
        }
        o[i] = best;
      }
    });
  });
}

void cumsum_kernel(const KernelArgs& k) {
  const Tensor& x = k.in[0];
  const Tensor& out = k.out[0];
  const int64_t axis = k.attrs.axis;
  // Plain variables, not a structured binding: the lambda below captures them, which
  // clang before 16 refuses for bindings (the fuzz build compiles this file with clang-14).
  const CumsumAttrs& cumsum_attrs = k.attrs.get<CumsumAttrs>(k.op);
  const bool exclusive = cumsum_attrs.exclusive, reverse = cumsum_attrs.reverse;
  const auto perm = axis_last_perm(x.ndim(), axis);
  const Tensor rows = contiguous_copy(permuted_view(x, perm));
  Tensor result = Tensor::empty(rows.shape(), x.dtype(), x.device());
  const int64_t n = x.shape()[size_t(axis)];
  visit_dtype(x.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (!std::is_same_v<T, bool>) {
      using A = acc_t<T>;
      const T* p = ptr<T>(rows);
      T* r = ptr<T>(result);
      const int64_t outer = n ? rows.numel() / n : 0;
      for (int64_t i = 0; i < outer; ++i) {
        A acc = 0;
        for (int64_t jj = 0; jj < n; ++jj) {
          const int64_t j = reverse ? n - 1 - jj : jj;
          const A v = A(compute_t<T>(p[i * n + j]));
          if (exclusive) {
            r[i * n + j] = convert<T>(compute_t<T>(acc));
            acc += v;
          } else {
            acc += v;
            r[i * n + j] = convert<T>(compute_t<T>(acc));
          }
        }
      }
    }
  });
  // Write back through a view of `out` permuted the same way.
  const Tensor in[1] = {result};
  const Tensor o[1] = {permuted_view(out, perm)};
  run_kernel(OpId::Copy, OpAttrs{}, in, o);
}

}  // namespace

void register_reduce_kernels() {
  for (OpId op : {OpId::Sum, OpId::Max, OpId::Min, OpId::Prod, OpId::LogSumExp}) {
    register_kernel(op, DeviceType::CPU, reduce_kernel);
  }
  register_kernel(OpId::ArgMax, DeviceType::CPU, arg_reduce_kernel);
  register_kernel(OpId::ArgMin, DeviceType::CPU, arg_reduce_kernel);
  register_kernel(OpId::Cumsum, DeviceType::CPU, cumsum_kernel);
}

}  // namespace strata::cpu_kernels
