// Creation functions: filled tensors, ranges, identity, literals. Each is a registered op
// with its scalars as attributes (no host fill and copy), run on the requested device —
// the calling thread's current device by default. Not recorded by autograd (no inputs).
#include <cmath>

#include <strata/core/op_common.h>

namespace strata {

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  return detail::compute1(OpId::Fill, OpAttrs(FillAttrs{value}), {}, shape, dtype, device);
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.dtype(), t.device()); }

Tensor arange(double start, double stop, double step, DType dtype, Device device) {
  STRATA_CHECK(step != 0.0, "arange: step must be non-zero");
  const double count = std::ceil((stop - start) / step);
  STRATA_CHECK(!std::isnan(count), "arange: start ", start, ", stop ", stop, " and step ", step,
               " do not define a range");
  // Converting a count of 2^63 or more (or inf) to int64 is undefined behaviour.
  STRATA_CHECK(count < 0x1p63, "arange: start ", start, ", stop ", stop, " and step ", step,
               " give a range that is too large or not finite (", count, " elements)");
  const int64_t n = count > 0 ? int64_t(count) : 0;
  RangeAttrs range;
  range.start = start;
  range.step = step;
  return detail::compute1(OpId::Arange, OpAttrs(range), {}, Shape{n}, dtype, device);
}

Tensor linspace(double start, double stop, int64_t num, DType dtype, Device device) {
  STRATA_CHECK(num >= 0, "linspace: num must be >= 0, got ", num);
  RangeAttrs range;
  range.start = start;
  range.stop = stop;
  return detail::compute1(OpId::Linspace, OpAttrs(range), {}, Shape{num}, dtype, device);
}

Tensor eye(int64_t n, DType dtype, Device device) {
  STRATA_CHECK(n >= 0, "eye: n must be >= 0, got ", n);
  return detail::compute1(OpId::Eye, OpAttrs{}, {}, Shape{n, n}, dtype, device);
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
