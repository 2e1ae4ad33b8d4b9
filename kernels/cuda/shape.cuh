// CUDA kernels of the copying shape ops: concat, pad, gather, scatter_add and one_hot (the
// views -- reshape, transpose, slice, broadcast_to -- need no kernel). Results match
// kernels/cpu/shape.cc: the copies move bits (one kernel per element size, which keeps
// the number of instantiations -- and nvcc's compile time -- low); scatter_add adds in
// the compute type and rounds once per addition, as the CPU does.
//
// Inputs are strided (views, broadcast operands, and a rank-0 host index read on the
// host); outputs are the front-end's fresh contiguous tensors.
//
// Out-of-range gather/scatter_add indices are data errors: the kernel cannot throw, so
// block 0 of the launch finds the first bad index (the smallest flat position, the one
// the CPU reports) and records it in the device's DataError (launch.h); the next
// synchronisation of the device raises the CPU's message. The other blocks write zeros
// for (gather) or skip (scatter_add) the elements of a bad index, so no memory outside
// the tensors is ever touched.
//
// scatter_add accumulates with atomicAdd: with repeated indices the order of the
// additions, and so the rounding of float results, varies from run to run (integer
// results are exact). The CPU adds in index order; compare float results with a tolerance.
// Each float16/bfloat16 addition rounds once, as the CPU's (the float32 sum of two 16-bit
// floats rounds to them as the exact sum would). One more difference: the PTX ISA says
// float32 atomic adds to global memory flush subnormal inputs and results to zero (float64,
// float16 and bfloat16 ones keep them); the CPU keeps them.
#pragma once

#include <algorithm>

#include <strata/kernels/cuda/common.cuh>

namespace strata::cuda_kernels {

namespace shape_detail {

// The unsigned type of an element's bits: the copying kernels move bits, never values.
template <size_t N> struct bits_of;
template <> struct bits_of<1> { using type = uint8_t; };
template <> struct bits_of<2> { using type = uint16_t; };
template <> struct bits_of<4> { using type = uint32_t; };
template <> struct bits_of<8> { using type = uint64_t; };
template <typename T> using bits_t = typename bits_of<sizeof(T)>::type;

template <typename U, typename T>
U to_bits(T v) {
  static_assert(sizeof(U) == sizeof(T));
  U u;
  std::memcpy(&u, &v, sizeof(U));
  return u;
}

// Calls fn(D{}, U{}) with the device type D of dtype t and its bit type U.
template <typename Fn>
decltype(auto) visit_bits(DType t, Fn&& fn) {
  return visit_device_dtype(t, [&](auto z) { return fn(z, bits_t<decltype(z)>{}); });
}

// Kernel parameters are limited to 4 KiB: batched launches carry at most this many parts.
inline constexpr int kBatch = 16;

// ---- indices ----

// An int32/int64 index tensor read as flat positions 0..count-1 (strided, or a rank-0
// host scalar passed by value), with the extent its values must stay below.
template <typename I>
struct IndexList {
  In<I> in;
  Indexer<1> ix;
  int64_t count = 0;
  int64_t extent = 0;

  __device__ __forceinline__ int64_t at(int64_t j) const {
    int64_t off[1];
    ix.offsets(j, off);
    return int64_t(in.at(off[0]));
  }
  __device__ __forceinline__ bool bad(int64_t v) const { return v < 0 || v >= extent; }
};

template <typename I>
IndexList<I> index_list(const char* op, const Tensor& idx, int64_t extent) {
  IndexList<I> l;
  l.in = input_of<I>(idx);
  const Strides* st[1] = {&idx.strides()};
  l.ix = make_indexer<1>(op, idx.shape(), st);
  l.count = idx.numel();
  l.extent = extent;
  return l;
}

// Calls fn(I{}) with the index type of an int32/int64 tensor.
template <typename Fn>
void visit_index(const char* op, const Tensor& idx, Fn&& fn) {
  if (idx.dtype() == kInt64) return fn(int64_t{});
  STRATA_CHECK(idx.dtype() == kInt32, op, ": indices must be int32 or int64, got ", idx.dtype());
  fn(int32_t{});
}

// Run by block 0 of the gather and scatter_add kernels (all its threads): records the
// first out-of-range index -- the smallest position, as the CPU reports it.
template <typename I>
__device__ void check_indices_block(const IndexList<I>& idx, DataError* err, OpId op, int64_t axis) {
  __shared__ int64_t first[cuda_backend::kBlockThreads];
  int64_t mine = idx.count;  // none
  for (int64_t j = threadIdx.x; j < idx.count; j += blockDim.x) {
    if (idx.bad(idx.at(j))) {
      mine = j;  // the first of this thread's positions
      break;
    }
  }
  first[threadIdx.x] = mine;
  __syncthreads();
  for (unsigned n = blockDim.x; n > 1;) {  // the minimum, for any block size
    const unsigned h = (n + 1) / 2;
    if (threadIdx.x < n - h && first[threadIdx.x + h] < first[threadIdx.x]) first[threadIdx.x] = first[threadIdx.x + h];
    __syncthreads();
    n = h;
  }
  if (threadIdx.x == 0 && first[0] < idx.count) {
    cuda_backend::record_data_error(err, DataErrorKind::IndexOutOfRange, op, idx.at(first[0]), first[0],
                                    idx.extent, axis);
  }
}

// ---- device code ----

template <typename U>
__global__ void fill_bits_kernel(int64_t n, U* __restrict__ out, U value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = value;
  }
}

// concat: part blockIdx.y of the batch copies its elements (read in row-major order of
// its shape) into its window of the contiguous output.
template <typename U>
struct ConcatPart {
  const U* ptr = nullptr;
  Indexer<1> ix;       // the part's strides
  int64_t numel = 0;
  int64_t block = 0;   // elements per outer index: extent along the axis * inner
  int64_t start = 0;   // where that block starts in an output row: offset along the axis * inner
};
template <typename U>
struct ConcatBatch {
  ConcatPart<U> part[kBatch];
  int64_t row = 0;  // elements of the output per outer index
};

template <typename U>
__global__ void concat_kernel(ConcatBatch<U> b, U* __restrict__ out) {
  const ConcatPart<U>& p = b.part[blockIdx.y];
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[1];
    p.ix.offsets(i, off);
    const int64_t o = i / p.block;
    out[o * b.row + p.start + (i - o * p.block)] = p.ptr[off[0]];
  }
}

// pad: output element i is the input element it covers, or the padding value. Dimensions
// are coalesced on the host (see pad_geometry).
struct PadGeometry {
  int ndim = 0;
  int64_t size[kMaxDims] = {};    // output extents
  int64_t before[kMaxDims] = {};  // padding before
  int64_t extent[kMaxDims] = {};  // input extents
  int64_t stride[kMaxDims] = {};  // input strides
};

template <typename U>
__global__ void pad_kernel(PadGeometry g, int64_t n, const U* __restrict__ x, U* __restrict__ out, U value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = i, off = 0;
    bool inside = x != nullptr;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const int64_t k = rem % g.size[d] - g.before[d];
      rem /= g.size[d];
      inside = inside && k >= 0 && k < g.extent[d];
      off += k * g.stride[d];
    }
    out[i] = inside ? x[off] : value;
  }
}

// gather: x viewed as [outer, extent, inner] (outer and inner strided), the output as the
// contiguous [outer, count, inner]. Block 0 checks the indices; the others copy.
struct GatherGeometry {
  Indexer<1> outer;  // x's dimensions before the axis
  Indexer<1> inner;  // x's dimensions after it
  int64_t axis_stride = 0;
  int64_t inner_n = 1;
  int64_t axis = 0;
};

template <typename U, typename I>
__global__ void gather_kernel(GatherGeometry g, IndexList<I> idx, int64_t n, const U* __restrict__ x,
                              U* __restrict__ out, DataError* err) {
  if (blockIdx.x == 0) return check_indices_block(idx, err, OpId::Gather, g.axis);
  for (int64_t t = int64_t(blockIdx.x - 1) * blockDim.x + threadIdx.x; t < n;
       t += int64_t(gridDim.x - 1) * blockDim.x) {
    const int64_t q = t / g.inner_n, c = t - q * g.inner_n;
    const int64_t o = q / idx.count, j = q - o * idx.count;
    const int64_t v = idx.at(j);
    if (idx.bad(v)) {
      out[t] = U(0);  // recorded by block 0
      continue;
    }
    int64_t oo[1], io[1];
    g.outer.offsets(o, oo);
    g.inner.offsets(c, io);
    out[t] = x[oo[0] + v * g.axis_stride + io[0]];
  }
}

template <typename T>
__device__ __forceinline__ void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    // Two's complement addition: the unsigned atomic adds the same bits.
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(p, v);  // float16 needs sm_70, bfloat16 sm_80 (native from sm_90)
  }
}

// scatter_add: updates [outer, count, inner] (strided, read in row-major order) added
// into the zeroed contiguous output [outer, extent, inner]. Block 0 checks the indices.
template <typename T, typename I>
__global__ void scatter_add_kernel(Indexer<1> upd_ix, int64_t n, int64_t inner_n, int64_t axis,
                                   IndexList<I> idx, const T* __restrict__ upd, T* out, DataError* err) {
  if (blockIdx.x == 0) return check_indices_block(idx, err, OpId::ScatterAdd, axis);
  for (int64_t t = int64_t(blockIdx.x - 1) * blockDim.x + threadIdx.x; t < n;
       t += int64_t(gridDim.x - 1) * blockDim.x) {
    const int64_t q = t / inner_n, c = t - q * inner_n;
    const int64_t o = q / idx.count, j = q - o * idx.count;
    const int64_t v = idx.at(j);
    if (idx.bad(v)) continue;  // recorded by block 0
    int64_t off[1];
    upd_ix.offsets(t, off);
    atomic_add(out + (o * idx.extent + v) * inner_n + c, upd[off[0]]);
  }
}

// one_hot: the contiguous output [count, depth]; an index outside [0, depth) gives an
// all-zero row (as the CPU and TensorFlow do).
template <typename U, typename I>
__global__ void one_hot_kernel(IndexList<I> idx, int64_t depth, int64_t n, U* __restrict__ out, U zero, U one) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = t / depth;
    out[t] = idx.at(j) == t - j * depth ? one : zero;
  }
}

// ---- host helpers ----

inline void require_contiguous_out(const char* op, const Tensor& out) {
  STRATA_CHECK(out.is_contiguous(), op, ": the CUDA kernel writes contiguous outputs");
}

inline Indexer<1> indexer_of(const char* op, const Shape& shape, const Strides& strides) {
  const Strides* st[1] = {&strides};
  return make_indexer<1>(op, shape, st);
}

// Dimensions [begin, end) of t's shape and strides.
inline Indexer<1> sub_indexer(const char* op, const Tensor& t, int64_t begin, int64_t end) {
  const Shape sh(t.shape().begin() + begin, t.shape().begin() + end);
  const Strides st(t.strides().begin() + begin, t.strides().begin() + end);
  return indexer_of(op, sh, st);
}

inline int64_t extent_product(const Shape& s, int64_t begin, int64_t end) {
  int64_t n = 1;
  for (int64_t d = begin; d < end; ++d) n *= s[size_t(d)];
  return n;
}

// Pad's geometry with extent-1 dimensions dropped, and a dimension without padding merged
// into the one before it when the input's strides allow: the merged index K = k * s + k'
// is inside exactly when k is (k' always is), at input offset (K - before * s) * stride'.
inline PadGeometry pad_geometry(const char* op, const Tensor& x, const std::vector<int64_t>& pads) {
  PadGeometry g;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    const int64_t b = pads[size_t(2 * d)], a = pads[size_t(2 * d + 1)];
    const int64_t e = x.shape()[size_t(d)], s = x.strides()[size_t(d)], size = e + b + a;
    if (size == 1) continue;  // index 0, inside (x is not empty here)
    if (g.ndim > 0 && b == 0 && a == 0 && g.stride[g.ndim - 1] == s * e) {
      const int k = g.ndim - 1;
      g.size[k] *= e;
      g.before[k] *= e;
      g.extent[k] *= e;
      g.stride[k] = s;
      continue;
    }
    STRATA_CHECK(g.ndim < kMaxDims, op, ": the CUDA kernel pads at most ", kMaxDims,
                 " dimensions that cannot be merged, got shape ", shape_str(x.shape()));
    g.size[g.ndim] = size;
    g.before[g.ndim] = b;
    g.extent[g.ndim] = e;
    g.stride[g.ndim] = s;
    ++g.ndim;
  }
  return g;
}

inline DataError* data_error_of(const KernelArgs& k) {
  return cuda_backend::device_data_error(k.stream.device().index);
}

}  // namespace shape_detail

// ---- host launchers (KernelFn) ----

inline void cuda_concat(const KernelArgs& k) {
  using namespace shape_detail;
  const Tensor& out = k.out[0];
  const char* op = op_name(k.op);
  if (out.numel() == 0) return;
  require_contiguous_out(op, out);
  const int64_t axis = k.attrs.axis;
  const int64_t inner = extent_product(out.shape(), axis + 1, out.ndim());
  visit_bits(out.dtype(), [&](auto, auto zu) {
    using U = decltype(zu);
    ConcatBatch<U> b;
    static_assert(sizeof(b) <= 4000, "kernel parameters are limited to 4 KiB");
    b.row = out.shape()[size_t(axis)] * inner;
    int count = 0;
    int64_t most = 0, start = 0;
    auto flush = [&] {
      if (count == 0) return;
      const unsigned threads = cuda_backend::block_for(most);
      cuda_backend::launch(op, concat_kernel<U>, dim3(cuda_backend::grid_for(most, threads), unsigned(count)),
                           dim3(threads), 0, k.stream, b, out_ptr<U>(out));
      count = 0;
      most = 0;
    };
    for (const Tensor& t : k.in) {
      const int64_t len = t.shape()[size_t(axis)];
      if (t.numel() > 0) {
        STRATA_CHECK(!on_host(t), op, ": the CUDA kernel got a host input");
        ConcatPart<U>& p = b.part[count++];
        p.ptr = static_cast<const U*>(t.raw_data());
        p.ix = indexer_of(op, t.shape(), t.strides());
        p.numel = t.numel();
        p.block = len * inner;
        p.start = start * inner;
        most = std::max(most, p.numel);
        if (count == kBatch) flush();
      }
      start += len;
    }
    flush();
  });
}

inline void cuda_pad(const KernelArgs& k) {
  using namespace shape_detail;
  const Tensor& x = k.in[0];
  const Tensor& out = k.out[0];
  const char* op = op_name(k.op);
  const int64_t n = out.numel();
  if (n == 0) return;
  require_contiguous_out(op, out);
  STRATA_CHECK(x.numel() == 0 || !on_host(x), op, ": the CUDA kernel got a host input");
  const PadGeometry g = x.numel() > 0 ? pad_geometry(op, x, k.attrs.pads) : PadGeometry{};
  const double value = k.attrs.get<PadAttrs>(k.op).value;
  visit_bits(out.dtype(), [&](auto z, auto zu) {
    using D = decltype(z);
    using U = decltype(zu);
    const U* xp = x.numel() > 0 ? static_cast<const U*>(x.raw_data()) : nullptr;
    const auto [grid, block] = cuda_backend::elementwise_shape(n);
    cuda_backend::launch(op, pad_kernel<U>, grid, block, 0, k.stream, g, n, xp, out_ptr<U>(out),
                         to_bits<U>(convert<D>(value)));
  });
}

inline void cuda_gather(const KernelArgs& k) {
  using namespace shape_detail;
  const Tensor& x = k.in[0];
  const Tensor& indices = k.in[1];
  const Tensor& out = k.out[0];
  const char* op = op_name(k.op);
  if (indices.numel() == 0) return;  // nothing to check or copy
  require_contiguous_out(op, out);
  STRATA_CHECK(!on_host(x), op, ": the CUDA kernel got a host input");
  const int64_t axis = k.attrs.axis;
  GatherGeometry g;
  g.outer = sub_indexer(op, x, 0, axis);
  g.inner = sub_indexer(op, x, axis + 1, x.ndim());
  g.axis_stride = x.strides()[size_t(axis)];
  g.inner_n = extent_product(x.shape(), axis + 1, x.ndim());
  g.axis = axis;
  const int64_t n = out.numel();
  // Block 0 checks the indices (even when nothing is copied, as the CPU does).
  const dim3 block(cuda_backend::block_for(std::max(n, indices.numel())));
  const dim3 grid(1 + cuda_backend::grid_for(n, block.x));
  visit_index(op, indices, [&](auto zi) {
    using I = decltype(zi);
    const IndexList<I> idx = index_list<I>(op, indices, x.shape()[size_t(axis)]);
    visit_bits(x.dtype(), [&](auto, auto zu) {
      using U = decltype(zu);
      cuda_backend::launch(op, gather_kernel<U, I>, grid, block, 0, k.stream, g, idx, n,
                           static_cast<const U*>(x.raw_data()), out_ptr<U>(out), data_error_of(k));
    });
  });
}

inline void cuda_scatter_add(const KernelArgs& k) {
  using namespace shape_detail;
  const Tensor& upd = k.in[0];
  const Tensor& indices = k.in[1];
  const Tensor& out = k.out[0];
  const char* op = op_name(k.op);
  require_contiguous_out(op, out);
  STRATA_CHECK(upd.dtype() != kBool, op, ": expected numeric updates, got bool");
  const int64_t axis = k.attrs.axis;
  const int64_t inner = extent_product(out.shape(), axis + 1, out.ndim());
  const int64_t n = upd.numel();
  STRATA_CHECK(n == 0 || !on_host(upd), op, ": the CUDA kernel got a host input");
  visit_bits(out.dtype(), [&](auto z, auto zu) {
    using D = decltype(z);
    using U = decltype(zu);
    if constexpr (!std::is_same_v<D, bool>) {
      if (out.numel() > 0) {
        const auto [grid, block] = cuda_backend::elementwise_shape(out.numel());
        cuda_backend::launch(op, fill_bits_kernel<U>, grid, block, 0, k.stream, out.numel(), out_ptr<U>(out), U(0));
      }
      if (indices.numel() == 0) return;
      const Indexer<1> upd_ix = indexer_of(op, upd.shape(), upd.strides());
      visit_index(op, indices, [&](auto zi) {
        using I = decltype(zi);
        const IndexList<I> idx = index_list<I>(op, indices, out.shape()[size_t(axis)]);
        // Block 0 checks the indices, the others add.
        const unsigned threads = cuda_backend::block_for(std::max(n, indices.numel()));
        cuda_backend::launch(op, scatter_add_kernel<D, I>, dim3(1 + cuda_backend::grid_for(n, threads)),
                             dim3(threads), 0, k.stream, upd_ix, n, inner, axis, idx,
                             static_cast<const D*>(upd.raw_data()), out_ptr<D>(out), data_error_of(k));
      });
    }
  });
}

inline void cuda_one_hot(const KernelArgs& k) {
  using namespace shape_detail;
  const Tensor& indices = k.in[0];
  const Tensor& out = k.out[0];
  const char* op = op_name(k.op);
  const int64_t n = out.numel();
  if (n == 0) return;
  require_contiguous_out(op, out);
  const int64_t depth = k.attrs.depth;
  visit_index(op, indices, [&](auto zi) {
    using I = decltype(zi);
    const IndexList<I> idx = index_list<I>(op, indices, depth);
    visit_bits(out.dtype(), [&](auto z, auto zu) {
      using D = decltype(z);
      using U = decltype(zu);
      const auto [grid, block] = cuda_backend::elementwise_shape(n);
      cuda_backend::launch(op, one_hot_kernel<U, I>, grid, block, 0, k.stream, idx, depth, n, out_ptr<U>(out),
                           to_bits<U>(convert<D>(0.0)), to_bits<U>(convert<D>(1.0)));
    });
  });
}

// Registers the family for DeviceType::CUDA (called by the backend's init, or by the
// emulation tests' registration).
inline void register_shape_kernels() {
  register_kernel(OpId::Concat, DeviceType::CUDA, cuda_concat);
  register_kernel(OpId::Pad, DeviceType::CUDA, cuda_pad);
  register_kernel(OpId::Gather, DeviceType::CUDA, cuda_gather);
  register_kernel(OpId::ScatterAdd, DeviceType::CUDA, cuda_scatter_add);
  register_kernel(OpId::OneHot, DeviceType::CUDA, cuda_one_hot);
}

}  // namespace strata::cuda_kernels
