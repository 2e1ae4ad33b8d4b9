// Creation functions: filled tensors, ranges, identity, literals. Not recorded by autograd.
#include <cmath>

#include "core/op_common.h"

namespace strata {

namespace {
// Host tensor on `device` (when it is a CPU device) filled with value.
Tensor host_full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device.is_cpu() ? device : Device());
  const int64_t n = t.numel();
  visit_dtype(dtype, [&](auto z) {
    using T = decltype(z);
    T* p = static_cast<T*>(t.raw_data());
    T v;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      v = T(float(value));
    } else if constexpr (std::is_same_v<T, bool>) {
      v = value != 0.0;
    } else {
      v = static_cast<T>(value);
    }
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
  return device.is_cpu() ? t : t.to(device);
}
}  // namespace

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  return host_full(shape, value, dtype, device);
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.dtype(), t.device()); }

Tensor arange(double start, double stop, double step, DType dtype, Device device) {
  STRATA_CHECK(step != 0.0, "arange: step must be non-zero");
  const double count = std::ceil((stop - start) / step);
  const int64_t n = count > 0 ? int64_t(count) : 0;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = start + double(i) * step;
  return Tensor::from_vector(v, Shape{n}, dtype, device);
}

Tensor linspace(double start, double stop, int64_t num, DType dtype, Device device) {
  STRATA_CHECK(num >= 0, "linspace: num must be >= 0, got ", num);
  std::vector<double> v(static_cast<size_t>(num));
  for (int64_t i = 0; i < num; ++i) {
    v[size_t(i)] = num == 1 ? start : start + (stop - start) * double(i) / double(num - 1);
  }
  return Tensor::from_vector(v, Shape{num}, dtype, device);
}

Tensor eye(int64_t n, DType dtype, Device device) {
  STRATA_CHECK(n >= 0, "eye: n must be >= 0, got ", n);
  std::vector<double> v(size_t(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[size_t(i * n + i)] = 1.0;
  return Tensor::from_vector(v, Shape{n, n}, dtype, device);
}

Tensor tensor(std::initializer_list<float> values) {
  return Tensor::from_vector(std::vector<float>(values));
}

Tensor tensor(std::initializer_list<std::initializer_list<float>> rows) {
  std::vector<float> v;
  const int64_t cols = rows.size() ? int64_t(rows.begin()->size()) : 0;
  for (const auto& r : rows) {
    STRATA_CHECK(int64_t(r.size()) == cols, "tensor: ragged rows (", r.size(), " vs ", cols,
                 " elements)");
    v.insert(v.end(), r.begin(), r.end());
  }
  return Tensor::from_vector(v, Shape{int64_t(rows.size()), cols});
}

}  // namespace strata
