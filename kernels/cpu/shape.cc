// CPU kernels of the copying shape ops: concat, pad, gather, scatter_add and one_hot.
#include <cstring>

#include <strata/core/data_error.h>
#include <strata/core/dispatch.h>
#include <strata/kernels/cpu/loops.h>

namespace strata::cpu_kernels {

namespace {

void copy_into(const Tensor& dst_view, const Tensor& src) {
  const Tensor in[1] = {src};
  const Tensor out[1] = {dst_view};
  run_kernel(OpId::Copy, OpAttrs{}, in, out);
}

// A view of `out` restricted to [start, start+len) along axis.
Tensor axis_window(const Tensor& out, int64_t axis, int64_t start, int64_t len) {
  Shape shape = out.shape();
  shape[size_t(axis)] = len;
  return Tensor::view_of(out.storage(), out.offset() + start * out.strides()[size_t(axis)], shape,
                         out.strides(), out.dtype());
}

void concat_kernel(const KernelArgs& k) {
  const int64_t axis = k.attrs.axis;
  int64_t start = 0;
  for (const Tensor& t : k.in) {
    const int64_t len = t.shape()[size_t(axis)];
    if (len > 0 && t.numel() > 0) copy_into(axis_window(k.out[0], axis, start, len), t);
    start += len;
  }
}

void pad_kernel(const KernelArgs& k) {
  const Tensor& x = k.in[0];
  const Tensor& out = k.out[0];
  visit_dtype(out.dtype(), [&](auto z) {
    using T = decltype(z);
    T v = convert<T>(k.attrs.get<PadAttrs>(k.op).value);
    T* p = ptr<T>(out);
    for (int64_t i = 0, n = out.numel(); i < n; ++i) p[i] = v;
  });
  if (x.numel() == 0) return;
  int64_t offset = out.offset();
  for (int64_t d = 0; d < x.ndim(); ++d) offset += k.attrs.pads[size_t(2 * d)] * out.strides()[size_t(d)];
  copy_into(Tensor::view_of(out.storage(), offset, x.shape(), out.strides(), out.dtype()), x);
}

// Reads integer indices as int64 (contiguous copy).
std::vector<int64_t> read_indices(const Tensor& idx) {
  const Tensor c = contiguous_copy(idx);
  std::vector<int64_t> v(static_cast<size_t>(c.numel()));
  if (c.dtype() == kInt64) {
    if (!v.empty()) std::memcpy(v.data(), c.raw_data(), v.size() * 8);
  } else {
    const int32_t* p = ptr<int32_t>(c);
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  }
  return v;
}

// Raises the same data error the other backends defer (core/data_error.h).
void check_indices(OpId op, const std::vector<int64_t>& idx, int64_t n, int64_t axis) {
  for (size_t j = 0; j < idx.size(); ++j) {
    if (idx[j] < 0 || idx[j] >= n) {
      raise_data_error(DataError{DataErrorKind::IndexOutOfRange, op, idx[j], int64_t(j), n, axis});
    }
  }
}

void gather_kernel(const KernelArgs& k) {
  const Tensor x = contiguous_copy(k.in[0]);
  const auto idx = read_indices(k.in[1]);
  const int64_t axis = k.attrs.axis;
  const int64_t n = x.shape()[size_t(axis)];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[size_t(d)];
  for (int64_t d = axis + 1; d < x.ndim(); ++d) inner *= x.shape()[size_t(d)];
  check_indices(OpId::Gather, idx, n, axis);
  const size_t row = size_t(inner) * x.itemsize();
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(k.out[0].raw_data());
  const int64_t m = int64_t(idx.size());
  parallel_for(outer * m, double(inner) * 0.2, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / m, j = t % m;
      std::memcpy(dst + size_t(t) * row, src + size_t(o * n + idx[size_t(j)]) * row, row);
    }
  });
}

void scatter_add_kernel(const KernelArgs& k) {
  const Tensor upd = contiguous_copy(k.in[0]);
  const auto idx = read_indices(k.in[1]);
  const Tensor& out = k.out[0];
  const int64_t axis = k.attrs.axis;
  const int64_t n = out.shape()[size_t(axis)];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out.shape()[size_t(d)];
  for (int64_t d = axis + 1; d < out.ndim(); ++d) inner *= out.shape()[size_t(d)];
  check_indices(OpId::ScatterAdd, idx, n, axis);
  const int64_t m = int64_t(idx.size());
  visit_dtype(out.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (!std::is_same_v<T, bool>) {
      using C = compute_t<T>;
      T* o = ptr<T>(out);
      const T* u = ptr<T>(upd);
      for (int64_t i = 0, total = out.numel(); i < total; ++i) o[i] = convert<T>(C(0));
      // Parallel over the outer axis only: rows of different outer indices never collide.
      parallel_for(outer, double(m * inner) * 0.5, [&](int64_t b, int64_t e) {
        for (int64_t oi = b; oi < e; ++oi) {
          for (int64_t j = 0; j < m; ++j) {
            T* dst = o + (oi * n + idx[size_t(j)]) * inner;
            const T* src = u + (oi * m + j) * inner;
            for (int64_t c = 0; c < inner; ++c) dst[c] = convert<T>(C(dst[c]) + C(src[c]));
          }
        }
      });
    }
  });
}

void one_hot_kernel(const KernelArgs& k) {
  const auto idx = read_indices(k.in[0]);
  const Tensor& out = k.out[0];
  const int64_t depth = k.attrs.depth;
  visit_dtype(out.dtype(), [&](auto z) {
    using T = decltype(z);
    T* o = ptr<T>(out);
    const T zero = convert<T>(0.0), one = convert<T>(1.0);
    for (int64_t i = 0, n = out.numel(); i < n; ++i) o[i] = zero;
    // As in TensorFlow, an index outside [0, depth) gives an all-zero row.
    for (size_t i = 0; i < idx.size(); ++i) {
      if (idx[i] >= 0 && idx[i] < depth) o[int64_t(i) * depth + idx[i]] = one;
    }
  });
}

}  // namespace

void register_shape_kernels() {
  register_kernel(OpId::Concat, DeviceType::CPU, concat_kernel);
  register_kernel(OpId::Pad, DeviceType::CPU, pad_kernel);
  register_kernel(OpId::Gather, DeviceType::CPU, gather_kernel);
  register_kernel(OpId::ScatterAdd, DeviceType::CPU, scatter_add_kernel);
  register_kernel(OpId::OneHot, DeviceType::CPU, one_hot_kernel);
}

}  // namespace strata::cpu_kernels
