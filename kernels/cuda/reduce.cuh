// CUDA kernels of the reductions (sum, max, min, prod, logsumexp), the arg-reductions and
// cumsum, and the row machinery the NN family shares (nn.cuh).
//
// Every reduction sees its input as [outer, n, inner] contiguous elements, output j =
// (o, i) reducing in[(o * n + r) * inner + i] over r: the input itself when it is
// contiguous and its reduced axes are adjacent, else a contiguous copy with the reduced
// axes last (inner = 1). Rows (inner = 1) run one group of 32..256 threads per row (a
// block holds several groups when rows are short) combining through warp shuffles and
// __shared__ memory; columns (inner > 1) run one thread per output walking r, helped by
// blockDim.y threads when there are few outputs. When there are too few outputs to fill
// the device, each output's elements are split over several blocks and a second pass
// combines their partial results (full reductions take this path).
//
// Accumulation follows kernels/cpu/reduce.cc: sums in float64 for every float dtype (in
// int64 for integers, exact), products, maxima and minima in the compute type (float32 for
// float16/bfloat16; integer products wrap), NaN propagating through max/min; logsumexp as
// max m, then m + log(sum(exp(double(x - m)))), with m returned as is when it is not
// finite. The order of the float64 additions differs from the CPU's (a tree instead of a
// sequence), which shows only in the last bits of a float64 result. Arg-reductions return
// the first index of the extreme, or of the first NaN. Cumsum accumulates in float64 /
// int64 in sequence along each line (bitwise equal to the CPU), or by a block-wide scan
// for long rows.
#pragma once

#include <algorithm>
#include <vector>

#include <strata/kernels/cuda/common.cuh>

namespace strata::cuda_kernels {

enum class ReduceCode : int { Sum, Prod, Max, Min, SumExp, ArgMax, ArgMin };

// The best element of an arg-reduction so far: its value and position (kNoIndex: none).
template <typename V>
struct ArgAcc {
  V value;
  int64_t index;
};
inline constexpr int64_t kNoIndex = LLONG_MAX;

template <typename A> struct is_arg : std::false_type {};
template <typename V> struct is_arg<ArgAcc<V>> : std::true_type {};
template <typename A> inline constexpr bool is_arg_v = is_arg<A>::value;

// Sums accumulate in float64 (float dtypes) or int64 (integers), as on the CPU.
template <typename T>
using sum_acc_t = std::conditional_t<is_float_v<T>, double, int64_t>;
// The value an arg-reduction compares: the compute type (int for bool).
template <typename T>
using arg_value_t = std::conditional_t<std::is_same_v<T, bool>, int, compute_t<T>>;

// Warps of the largest block (the row machinery's __shared__ slots).
inline constexpr unsigned kMaxWarps = cuda_backend::kBlockThreads / 32;

// When a reduction splits its outputs' elements over several blocks: outputs fewer than
// kTargetSegments, and at least kSplitMinChunk elements per split. Column reductions with
// fewer than kWideCols outputs let blockDim.y threads share each output's elements, with
// at least kColMinPerThread elements each. The emulator (one std::thread per CUDA thread)
// gets small values, so that small test shapes take every path.
#if defined(STRATA_CUDA_EMULATION)
inline constexpr int64_t kTargetSegments = 4;
inline constexpr int64_t kSplitMinChunk = 64;
inline constexpr int64_t kWideCols = 64;
inline constexpr int64_t kColMinPerThread = 4;
inline constexpr int64_t kScanMinRow = 64;
#else
inline constexpr int64_t kTargetSegments = 1024;
inline constexpr int64_t kSplitMinChunk = 4096;
inline constexpr int64_t kWideCols = 8192;
inline constexpr int64_t kColMinPerThread = 16;
inline constexpr int64_t kScanMinRow = 64;  // rows at least this long are scanned by a block
#endif

// ---- device code ----

namespace reduce_detail {

template <typename A>
__device__ __forceinline__ A identity(ReduceCode code) {
  if constexpr (is_arg_v<A>) {
    A a;
    a.value = decltype(a.value)(0);
    a.index = kNoIndex;
    return a;
  } else {
    switch (code) {
      case ReduceCode::Prod: return A(1);
      case ReduceCode::Max:
        if constexpr (std::is_floating_point_v<A>) {
          return A(-INFINITY);
        } else {
          return int_limits<A>::lo;
        }
      case ReduceCode::Min:
        if constexpr (std::is_floating_point_v<A>) {
          return A(INFINITY);
        } else {
          return int_limits<A>::hi;
        }
      default: return A(0);
    }
  }
}

// Whether b beats a: the extreme value, NaN beating every number, ties to the lower index.
template <typename V>
__device__ __forceinline__ bool arg_takes(bool want_max, const ArgAcc<V>& a, const ArgAcc<V>& b) {
  if (b.index == kNoIndex) return false;
  if (a.index == kNoIndex) return true;
  const bool an = dmath::is_nan(a.value), bn = dmath::is_nan(b.value);
  if (an || bn) return an && bn ? b.index < a.index : bn;
  if (b.value == a.value) return b.index < a.index;
  return want_max ? b.value > a.value : b.value < a.value;
}

// Combines two partial results (commutative: a warp's lanes all get the same result).
template <typename A>
__device__ __forceinline__ A combine(ReduceCode code, A a, A b) {
  if constexpr (is_arg_v<A>) {
    return arg_takes(code == ReduceCode::ArgMax, a, b) ? b : a;
  } else {
    switch (code) {
      case ReduceCode::Prod:
        if constexpr (std::is_integral_v<A>) {
          using U = std::make_unsigned_t<A>;  // wraps, as the CPU's products do in practice
          return A(U(a) * U(b));
        } else {
          return a * b;
        }
      case ReduceCode::Max:
        if (dmath::is_nan(a)) return a;
        if (dmath::is_nan(b)) return b;
        return b > a ? b : a;
      case ReduceCode::Min:
        if (dmath::is_nan(a)) return a;
        if (dmath::is_nan(b)) return b;
        return b < a ? b : a;
      default: return a + b;
    }
  }
}

// Element r of an output's elements as an accumulator value. `m` is that output's maximum
// (SumExp only). A second pass reads accumulators (In == A) as they are.
template <typename A, typename In>
__device__ __forceinline__ A to_acc(ReduceCode code, In v, int64_t r, compute_t<In> m) {
  if constexpr (is_arg_v<In>) {
    return v;
  } else if constexpr (is_arg_v<A>) {
    A a;
    a.value = decltype(a.value)(load(v));
    a.index = r;
    return a;
  } else {
    const compute_t<In> c = load(v);
    if constexpr (std::is_floating_point_v<A> && std::is_floating_point_v<compute_t<In>>) {
      if (code == ReduceCode::SumExp) return A(dmath::exp(double(c - m)));  // difference in C, as the CPU
    }
    return A(c);
  }
}

template <typename A>
__device__ __forceinline__ A shfl_xor(A v, int lane_mask) {
  if constexpr (is_arg_v<A>) {
    A r;
    r.value = __shfl_xor_sync(0xffffffffu, v.value, lane_mask);
    r.index = __shfl_xor_sync(0xffffffffu, v.index, lane_mask);
    return r;
  } else {
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
  }
}

}  // namespace reduce_detail

// Combines v over the blockDim.x threads of each row group (threadIdx.y; blockDim.x a
// multiple of 32, at most kBlockThreads) and returns the result to all of them. Every
// thread of the block calls it; `smem` holds kMaxWarps values.
template <typename A>
__device__ __forceinline__ A group_allreduce(ReduceCode code, A v, A* smem) {
  for (int d = 16; d > 0; d >>= 1) v = reduce_detail::combine(code, v, reduce_detail::shfl_xor(v, d));
  const unsigned warps = blockDim.x / 32;
  if (warps == 1) return v;
  const unsigned base = threadIdx.y * warps;
  if (threadIdx.x % 32 == 0) smem[base + threadIdx.x / 32] = v;
  __syncthreads();
  A r = smem[base];
  for (unsigned w = 1; w < warps; ++w) r = reduce_detail::combine(code, r, smem[base + w]);
  __syncthreads();  // smem is reused by the next call
  return r;
}

// One launch of a reduction pass. Pass 1 reads the input (In = the dtype T); when the
// elements of an output are split (splits > 1) it writes one partial accumulator per
// (output, split) and pass 2 (In = A, splits = 1) combines them.
template <typename In, typename A, typename Out>
struct ReduceParams {
  const In* in;
  int64_t outer, n, inner, splits;
  A* partial;          // splits > 1: rows [output][split], columns [split][output]
  Out* out;            // else: the output
  const In* load_max;  // SumExp: the maximum of each output's elements
  const Out* lse_max;  // LogSumExp, final pass: the same maxima
  ReduceCode code;
};

template <typename In, typename A, typename Out>
__device__ __forceinline__ void reduce_finish(const ReduceParams<In, A, Out>& p, int64_t j, A acc) {
  if constexpr (is_arg_v<A>) {
    p.out[j] = Out(acc.index);
  } else {
    using C = compute_t<Out>;
    if constexpr (is_float_v<Out>) {
      if (p.lse_max) {
        const C m = load(p.lse_max[j]);
        p.out[j] = dmath::is_finite(m) ? store<Out>(C(double(m) + dmath::log(double(acc)))) : p.lse_max[j];
        return;
      }
    }
    p.out[j] = store<Out>(C(acc));
  }
}

// inner == 1: row group threadIdx.y of each block reduces segment (row, split).
template <typename In, typename A, typename Out>
__global__ void reduce_rows_kernel(ReduceParams<In, A, Out> p) {
  __shared__ A smem[kMaxWarps];
  const int64_t segments = p.outer * p.splits;
  const int64_t chunk = (p.n + p.splits - 1) / p.splits;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < segments;
       base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t s = base + threadIdx.y;
    A acc = reduce_detail::identity<A>(p.code);
    if (s < segments) {
      const int64_t row = s / p.splits;
      const int64_t lo = (s % p.splits) * chunk;
      const int64_t hi = lo + chunk < p.n ? lo + chunk : p.n;
      const In* x = p.in + row * p.n;
      const compute_t<In> m = p.load_max ? load(p.load_max[row]) : compute_t<In>{};
      for (int64_t r = lo + threadIdx.x; r < hi; r += blockDim.x) {
        acc = reduce_detail::combine(p.code, acc, reduce_detail::to_acc<A>(p.code, x[r], r, m));
      }
    }
    acc = group_allreduce(p.code, acc, smem);
    if (threadIdx.x == 0 && s < segments) {
      if (p.partial) {
        p.partial[s] = acc;
      } else {
        reduce_finish(p, s, acc);
      }
    }
  }
}

// inner > 1: thread x of each block reduces one output, with blockDim.y threads sharing its
// elements; blockIdx.y is the split.
template <typename In, typename A, typename Out>
__global__ void reduce_cols_kernel(ReduceParams<In, A, Out> p) {
  __shared__ A smem[cuda_backend::kBlockThreads];
  const int64_t cols = p.outer * p.inner;
  const int64_t chunk = (p.n + p.splits - 1) / p.splits;
  const int64_t part = blockIdx.y;
  const int64_t lo = part * chunk;
  const int64_t hi = lo + chunk < p.n ? lo + chunk : p.n;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.x; base < cols; base += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = base + threadIdx.x;
    A acc = reduce_detail::identity<A>(p.code);
    if (j < cols) {
      const In* x = p.in + (j / p.inner) * p.n * p.inner + j % p.inner;
      const compute_t<In> m = p.load_max ? load(p.load_max[j]) : compute_t<In>{};
      for (int64_t r = lo + threadIdx.y; r < hi; r += blockDim.y) {
        acc = reduce_detail::combine(p.code, acc, reduce_detail::to_acc<A>(p.code, x[r * p.inner], r, m));
      }
    }
    if (blockDim.y > 1) {
      smem[threadIdx.y * blockDim.x + threadIdx.x] = acc;
      __syncthreads();
      if (threadIdx.y == 0) {
        for (unsigned k = 1; k < blockDim.y; ++k) {
          acc = reduce_detail::combine(p.code, acc, smem[k * blockDim.x + threadIdx.x]);
        }
      }
      __syncthreads();
    }
    if (threadIdx.y == 0 && j < cols) {
      if (p.partial) {
        p.partial[part * cols + j] = acc;
      } else {
        reduce_finish(p, j, acc);
      }
    }
  }
}

// Cumsum, one thread per line (o, i), in sequence as the CPU.
template <typename T, typename A>
__global__ void cumsum_lines_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t outer, int64_t n,
                                    int64_t inner, bool exclusive, bool reverse) {
  const int64_t lines = outer * inner;
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < lines;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (j / inner) * n * inner + j % inner;
    A acc = A(0);
    for (int64_t jj = 0; jj < n; ++jj) {
      const int64_t at = base + (reverse ? n - 1 - jj : jj) * inner;
      const A v = A(load(in[at]));
      if (exclusive) {
        out[at] = store<T>(compute_t<T>(acc));
        acc += v;
      } else {
        acc += v;
        out[at] = store<T>(compute_t<T>(acc));
      }
    }
  }
}

// Cumsum of long rows (inner == 1): a block per row scans tiles of blockDim.x elements
// (warp shuffles, then the warps' totals), carrying the running total between tiles.
template <typename T, typename A>
__global__ void cumsum_rows_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t rows, int64_t n,
                                   bool exclusive, bool reverse) {
  __shared__ A warp_total[kMaxWarps];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    A carry = A(0);
    for (int64_t t0 = 0; t0 < n; t0 += blockDim.x) {
      const int64_t jj = t0 + threadIdx.x;
      const int64_t at = row * n + (reverse ? n - 1 - jj : jj);
      const A v = jj < n ? A(load(in[at])) : A(0);
      A x = v;  // inclusive scan within the warp
      for (unsigned d = 1; d < 32; d <<= 1) {
        const A y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
      }
      A before = __shfl_up_sync(0xffffffffu, x, 1);  // exclusive: the previous lane's
      if (lane == 0) before = A(0);
      if (lane == 31) warp_total[warp] = x;
      __syncthreads();
      A prior = carry;  // totals of the previous tiles and warps
      A tile = A(0);
      for (unsigned w = 0; w < warps; ++w) {
        if (w < warp) prior += warp_total[w];
        tile += warp_total[w];
      }
      __syncthreads();
      if (jj < n) out[at] = store<T>(compute_t<T>(prior + (exclusive ? before : x)));
      carry += tile;
    }
  }
}

// ---- host launchers ----

namespace reduce_detail {

// t itself when contiguous, else a contiguous copy on its device (not taped), on `stream`.
inline Tensor contiguous_on(const Tensor& t, const Stream& stream) {
  if (t.is_contiguous()) return t;
  StreamGuard guard(stream);
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  const Tensor in[1] = {t}, out[1] = {c};
  run_kernel(OpId::Copy, OpAttrs{}, in, out);
  return c;
}

// Device memory for `count` values of A, on the current stream (a kernel's stream).
template <typename A>
Tensor scratch(int64_t count, Device device) {
  const int64_t words = (count * int64_t(sizeof(A)) + 7) / 8;
  return Tensor::empty({words}, kInt64, device);
}

}  // namespace reduce_detail

// A contiguous tensor seen as [outer, n, inner] around `axis`.
struct AxisLayout {
  int64_t outer = 1, n = 1, inner = 1;
};
inline AxisLayout axis_layout(const Shape& shape, int64_t axis) {
  AxisLayout l;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    if (d < axis) l.outer *= shape[size_t(d)];
    if (d == axis) l.n = shape[size_t(d)];
    if (d > axis) l.inner *= shape[size_t(d)];
  }
  return l;
}

// Launch shape of row groups: `groups` rows of about n elements each, a group of 32..256
// threads per row (fewer rows than threads when rows are short: several per block).
struct RowGroups {
  dim3 grid, block;
};
inline RowGroups row_groups(int64_t groups, int64_t n) {
  unsigned tpr = 32;
  while (tpr < cuda_backend::kBlockThreads && int64_t(tpr) < n) tpr *= 2;
  unsigned per_block = cuda_backend::kBlockThreads / tpr;
  if (int64_t(per_block) > groups) per_block = unsigned(groups > 1 ? groups : 1);
  return {dim3(cuda_backend::grid_for(groups, per_block)), dim3(tpr, per_block)};
}

// A reduction's input as [outer, n, inner] contiguous elements (see the top of the file).
struct ReduceLayout {
  Tensor src;
  int64_t outer = 1, n = 1, inner = 1;
};

inline ReduceLayout reduce_layout(const Tensor& x, const std::vector<int64_t>& axes, const Stream& stream) {
  const Shape& shape = x.shape();
  const int64_t rank = x.ndim();
  std::vector<bool> reduced(size_t(rank), false);
  for (int64_t a : axes) reduced[size_t(a)] = true;
  ReduceLayout l;
  if (x.is_contiguous()) {
    // Kept axes, then the reduced ones, then kept ones (extent-1 axes do not count).
    int phase = 0;
    bool adjacent = true;
    int64_t outer = 1, n = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t e = shape[size_t(d)];
      if (e == 1) continue;
      if (reduced[size_t(d)]) {
        if (phase == 2) adjacent = false;
        phase = 1;
        n *= e;
      } else if (phase == 0) {
        outer *= e;
      } else {
        phase = 2;
        inner *= e;
      }
    }
    if (adjacent) {
      l.src = x;
      l.outer = outer, l.n = n, l.inner = inner;
      return l;
    }
  }
  // Rows: the kept axes first, the reduced ones last.
  Shape sh;
  Strides st;
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t d = 0; d < rank; ++d) {
      if (reduced[size_t(d)] != (pass == 1)) continue;
      sh.push_back(shape[size_t(d)]);
      st.push_back(x.strides()[size_t(d)]);
      (pass == 1 ? l.n : l.outer) *= shape[size_t(d)];
    }
  }
  l.src = reduce_detail::contiguous_on(Tensor::view_of(x.storage(), x.offset(), sh, st, x.dtype()), stream);
  l.inner = 1;
  return l;
}

// Splits per row: enough segments to fill the device when rows are few and long.
inline int64_t reduce_splits(int64_t outputs, int64_t n) {
  if (outputs >= kTargetSegments || n < 2 * kSplitMinChunk) return 1;
  const int64_t by_size = (n + kSplitMinChunk - 1) / kSplitMinChunk;
  const int64_t by_count = std::max<int64_t>(1, kTargetSegments / outputs);
  return std::min(by_size, by_count);
}

// Runs the reduction of layout l with accumulator A into out (the output, contiguous).
// SumExp reads the per-output maxima load_max; lse_max makes the final pass logsumexp's.
template <typename T, typename A, typename Out>
void run_reduction(const char* op, const ReduceLayout& l, ReduceCode code, Out* out, const T* load_max,
                   const Out* lse_max, const Stream& stream) {
  using cuda_backend::launch;
  ReduceParams<T, A, Out> p{static_cast<const T*>(l.src.raw_data()), l.outer, l.n, l.inner, 1, nullptr, out,
                            load_max, lse_max, code};
  // A second pass combines partial sums of exponentials as sums.
  const ReduceCode combine_code = code == ReduceCode::SumExp ? ReduceCode::Sum : code;
  const Device device = l.src.device();
  if (l.inner == 1) {
    p.splits = reduce_splits(l.outer, l.n);
    const int64_t segments = l.outer * p.splits;
    const RowGroups g = row_groups(segments, (l.n + p.splits - 1) / p.splits);
    if (p.splits == 1) return launch(op, reduce_rows_kernel<T, A, Out>, g.grid, g.block, 0, stream, p);
    const Tensor partial = reduce_detail::scratch<A>(segments, device);
    p.partial = static_cast<A*>(partial.raw_data());
    launch(op, reduce_rows_kernel<T, A, Out>, g.grid, g.block, 0, stream, p);
    const ReduceParams<A, A, Out> q{p.partial, l.outer, p.splits, 1, 1, nullptr, out, nullptr, lse_max, combine_code};
    const RowGroups g2 = row_groups(l.outer, p.splits);
    return launch(op, reduce_rows_kernel<A, A, Out>, g2.grid, g2.block, 0, stream, q);
  }
  // Columns: x over outputs, y over each output's elements, blockIdx.y over splits.
  const int64_t cols = l.outer * l.inner;
  auto plan = [&](int64_t n, bool may_split, int64_t* splits) {
    const unsigned bx = cols < 32 ? unsigned(cols) : 32u;
    unsigned by = 1;
    if (cols < kWideCols) {
      while (bx * by * 2 <= cuda_backend::kBlockThreads && int64_t(by) * 2 * kColMinPerThread <= n) by *= 2;
    }
    const int64_t col_blocks = (cols + bx - 1) / bx;
    *splits = may_split ? reduce_splits(col_blocks, n) : 1;
    return std::pair{dim3(cuda_backend::grid_for(cols, bx), unsigned(*splits)), dim3(bx, by)};
  };
  const auto [grid, block] = plan(l.n, true, &p.splits);
  if (p.splits == 1) return launch(op, reduce_cols_kernel<T, A, Out>, grid, block, 0, stream, p);
  const Tensor partial = reduce_detail::scratch<A>(p.splits * cols, device);
  p.partial = static_cast<A*>(partial.raw_data());
  launch(op, reduce_cols_kernel<T, A, Out>, grid, block, 0, stream, p);
  ReduceParams<A, A, Out> q{p.partial, 1, p.splits, cols, 1, nullptr, out, nullptr, lse_max, combine_code};
  const auto [grid2, block2] = plan(p.splits, false, &q.splits);
  launch(op, reduce_cols_kernel<A, A, Out>, grid2, block2, 0, stream, q);
}

inline ReduceCode reduce_code(OpId op) {
  switch (op) {
    case OpId::Sum: return ReduceCode::Sum;
    case OpId::Prod: return ReduceCode::Prod;
    case OpId::Max: return ReduceCode::Max;
    case OpId::Min: return ReduceCode::Min;
    case OpId::ArgMax: return ReduceCode::ArgMax;
    case OpId::ArgMin: return ReduceCode::ArgMin;
    default: break;
  }
  fail(op_name(op), ": not a reduction with a CUDA kernel");
}

// Sum, Max, Min, Prod, LogSumExp (over attrs.axes), ArgMax, ArgMin (over attrs.axis).
inline void cuda_reduce(const KernelArgs& k) {
  const Tensor& x = k.in[0];
  const Tensor& out = k.out[0];
  const char* op = op_name(k.op);
  STRATA_CHECK(!on_host(x), op, ": the CUDA kernel got a host input");
  if (out.numel() == 0) return;
  STRATA_CHECK(out.is_contiguous(), op, ": the CUDA kernel writes contiguous outputs");
  const bool arg = k.op == OpId::ArgMax || k.op == OpId::ArgMin;
  const std::vector<int64_t> axes = arg ? std::vector<int64_t>{k.attrs.axis} : k.attrs.axes;
  int64_t n = 1;
  for (int64_t a : axes) n *= x.shape()[size_t(a)];
  StreamGuard guard(k.stream);  // temporaries and helper ops on the kernel's stream
  if (n == 0) {  // sums of nothing are 0, products 1 (the front-end refuses the others)
    const OpAttrs fill(FillAttrs{k.op == OpId::Prod ? 1.0 : 0.0});
    const Tensor o[1] = {out};
    return run_kernel(OpId::Fill, fill, {}, o);
  }
  const ReduceLayout l = reduce_layout(x, axes, k.stream);
  visit_device_dtype(x.dtype(), [&](auto z) {
    using T = decltype(z);
    if (arg) {
      return run_reduction<T, ArgAcc<arg_value_t<T>>, int64_t>(op, l, reduce_code(k.op), out_ptr<int64_t>(out),
                                                               nullptr, nullptr, k.stream);
    }
    if constexpr (std::is_same_v<T, bool>) {
      fail(op, ": no CUDA kernel for bool");
    } else {
      using C = compute_t<T>;
      if (k.op == OpId::Sum) {
        return run_reduction<T, sum_acc_t<T>, T>(op, l, ReduceCode::Sum, out_ptr<T>(out), nullptr, nullptr,
                                                 k.stream);
      }
      if (k.op != OpId::LogSumExp) {
        return run_reduction<T, C, T>(op, l, reduce_code(k.op), out_ptr<T>(out), nullptr, nullptr, k.stream);
      }
      if constexpr (is_float_v<T>) {
        // The maxima first, then m + log(sum(exp(x - m))).
        const Tensor m = Tensor::empty(out.shape(), out.dtype(), out.device());
        const T* mp = out_ptr<T>(m);
        run_reduction<T, C, T>(op, l, ReduceCode::Max, out_ptr<T>(m), nullptr, nullptr, k.stream);
        run_reduction<T, double, T>(op, l, ReduceCode::SumExp, out_ptr<T>(out), mp, mp, k.stream);
      } else {
        fail(op, ": no CUDA kernel for dtype ", x.dtype());
      }
    }
  });
}

inline void cuda_cumsum(const KernelArgs& k) {
  const Tensor& out = k.out[0];
  const char* op = op_name(k.op);
  STRATA_CHECK(!on_host(k.in[0]), op, ": the CUDA kernel got a host input");
  if (out.numel() == 0) return;
  STRATA_CHECK(out.is_contiguous(), op, ": the CUDA kernel writes contiguous outputs");
  const CumsumAttrs& a = k.attrs.get<CumsumAttrs>(k.op);
  const Tensor x = reduce_detail::contiguous_on(k.in[0], k.stream);
  const AxisLayout l = axis_layout(x.shape(), k.attrs.axis);
  visit_device_dtype(x.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_same_v<T, bool>) {
      fail(op, ": no CUDA kernel for bool");
    } else {
      using A = sum_acc_t<T>;
      const T* in = static_cast<const T*>(x.raw_data());
      if (l.inner == 1 && l.n >= kScanMinRow) {
        const RowGroups g = row_groups(1, l.n);  // one row per block
        return cuda_backend::launch(op, cumsum_rows_kernel<T, A>, dim3(cuda_backend::grid_for(l.outer, 1)),
                                    g.block, 0, k.stream, in, out_ptr<T>(out), l.outer, l.n, a.exclusive,
                                    a.reverse);
      }
      const int64_t lines = l.outer * l.inner;
      const RowGroups g = row_groups(1, lines);
      cuda_backend::launch(op, cumsum_lines_kernel<T, A>, dim3(cuda_backend::grid_for(lines, g.block.x)), g.block,
                           0, k.stream, in, out_ptr<T>(out), l.outer, l.n, l.inner, a.exclusive, a.reverse);
    }
  });
}

// Registers the family for DeviceType::CUDA (called by the backend's init, or by the
// emulation tests' registration).
inline void register_reduce_kernels() {
  for (OpId op : {OpId::Sum, OpId::Max, OpId::Min, OpId::Prod, OpId::LogSumExp, OpId::ArgMax, OpId::ArgMin}) {
    register_kernel(op, DeviceType::CUDA, cuda_reduce);
  }
  register_kernel(OpId::Cumsum, DeviceType::CUDA, cuda_cumsum);
}

}  // namespace strata::cuda_kernels
