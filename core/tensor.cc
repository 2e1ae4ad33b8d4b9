#include <strata/core/tensor.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include <strata/core/checked_math.h>
#include <strata/core/dispatch.h>
#include <strata/core/ops.h>
#include <strata/core/pinned_host_allocator.h>
#include <strata/core/recorder.h>

namespace strata {

uint64_t next_tensor_id() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  const size_t bytes = checked_nbytes(shape, dtype_size(dtype), "empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(bytes, device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->device = device;
  impl->id = next_tensor_id();
  return Tensor(std::move(impl));
}

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, int64_t offset, Shape shape,
                       Strides strides, DType dtype) {
  // Every kernel trusts a tensor's shape, strides and offset: a view reaching outside its
  // storage would read or write out of bounds (or segfault) far from the call that made it.
  STRATA_CHECK(storage != nullptr, "Tensor::view_of: null storage");
  STRATA_CHECK(shape.size() == strides.size(), "Tensor::view_of: shape ", shape_str(shape),
               " has rank ", shape.size(), " but strides ", shape_str(strides), " have rank ",
               strides.size());
  const int64_t numel = checked_numel(shape, "Tensor::view_of");
  if (numel > 0) {
    // The lowest and highest elements the view addresses, in elements, then bytes.
    auto overflow = [&] {
      fail("Tensor::view_of: offset ", offset, " with shape ", shape_str(shape), " and strides ",
           shape_str(strides), " overflows int64");
    };
    int64_t lo = offset, hi = offset;
    for (size_t d = 0; d < shape.size(); ++d) {
      int64_t reach = 0;
      if (__builtin_mul_overflow(shape[d] - 1, strides[d], &reach)) overflow();
      int64_t& bound = reach < 0 ? lo : hi;
      if (__builtin_add_overflow(bound, reach, &bound)) overflow();
    }
    const int64_t item = int64_t(dtype_size(dtype));
    int64_t end_byte = 0;
    if (__builtin_add_overflow(hi, 1, &end_byte) || __builtin_mul_overflow(end_byte, item, &end_byte)) overflow();
    STRATA_CHECK(lo >= 0 && uint64_t(end_byte) <= uint64_t(storage->bytes()), "Tensor::view_of: a ",
                 dtype, " view with offset ", offset, ", shape ", shape_str(shape), " and strides ",
                 shape_str(strides), " addresses elements ", lo, " to ", hi, ", outside the ",
                 storage->bytes(), "-byte storage (", storage->bytes() / size_t(item), " elements)");
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->device = storage->device();
  impl->storage = std::move(storage);
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  impl->id = next_tensor_id();
  return Tensor(std::move(impl));
}

Tensor Tensor::scalar(double value, DType dtype, Device device) {
  return full({}, value, dtype, device);
}

int64_t Tensor::dim(int64_t axis) const {
  return shape()[size_t(normalize_axis(axis, ndim(), "Tensor::dim"))];
}

bool Tensor::is_contiguous() const {
  const auto& sh = shape();
  const auto& st = strides();
  int64_t expected = 1;
  for (size_t i = sh.size(); i-- > 0;) {
    if (sh[i] != 1 && st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

bool Tensor::shares_storage(const Tensor& other) const {
  return defined() && other.defined() && storage() == other.storage();
}

void* Tensor::raw_data() const {
  return static_cast<char*>(impl().storage->data()) + impl().offset * int64_t(itemsize());
}

Tensor Tensor::reshape(const Shape& s) const { return strata::reshape(*this, s); }
Tensor Tensor::transpose() const {
  std::vector<int64_t> perm(static_cast<size_t>(ndim()));
  for (int64_t i = 0; i < ndim(); ++i) perm[size_t(i)] = ndim() - 1 - i;
  return permute(perm);
}
Tensor Tensor::transpose(int64_t a, int64_t b) const {
  std::vector<int64_t> perm(static_cast<size_t>(ndim()));
  for (int64_t i = 0; i < ndim(); ++i) perm[size_t(i)] = i;
  a = normalize_axis(a, ndim(), "transpose");
  b = normalize_axis(b, ndim(), "transpose");
  std::swap(perm[size_t(a)], perm[size_t(b)]);
  return permute(perm);
}
Tensor Tensor::permute(const std::vector<int64_t>& perm) const { return strata::permute(*this, perm); }
Tensor Tensor::slice(int64_t axis, int64_t start, int64_t end, int64_t step) const {
  return strata::slice(*this, axis, start, end, step);
}
Tensor Tensor::broadcast_to(const Shape& s) const { return strata::broadcast_to(*this, s); }
Tensor Tensor::expand_dims(int64_t axis) const { return strata::expand_dims(*this, axis); }
Tensor Tensor::squeeze(int64_t axis) const { return strata::squeeze(*this, axis); }
Tensor Tensor::squeeze() const {
  Shape s;
  for (int64_t d : shape()) {
    if (d != 1) s.push_back(d);
  }
  return strata::reshape(*this, s);
}
Tensor Tensor::contiguous() const { return strata::contiguous(*this); }
Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(shape(), dtype(), device());
  out.copy_(*this);
  // Recorded as a copy so that gradients flow through clones (copy_ itself is not taped).
  const Tensor in[1] = {*this}, outs[1] = {out};
  record_op(OpId::Copy, OpAttrs{}, in, outs);
  return out;
}
Tensor Tensor::cast(DType t) const { return strata::cast(*this, t); }

void Tensor::require_host_addressable(const char* what) const {
  STRATA_CHECK(impl().storage->host_addressable(), what, ": the memory of a ", device(),
               " tensor is not addressable from the host (copy it with Tensor::to(cpu()) first)");
}

Tensor Tensor::to(Device target, bool non_blocking) const {
  if (device() == target) return *this;
  // Logical CPU devices share host memory, but a tensor placed on another device is its
  // own copy (as in TensorFlow), so replicas never alias each other's values.
  CopyFn copy = find_copy(device().type, target.type);
  STRATA_CHECK(copy != nullptr, "Tensor::to: cannot copy from ", device(), " to ", target,
               " (strata was built without the CUDA backend, or it is not linked into this program)");
  // The copy runs on the stream of its device side (the destination's unless that is the
  // host); its output is allocated for the destination's current stream.
  const Stream stream = target.is_cpu() ? current_stream(device()) : current_stream(target);
  // A non-blocking copy from a GPU lands in page-locked memory, as in PyTorch: into
  // pageable memory the copy could not run behind the host's back.
  const bool pin = non_blocking && target.is_cpu() && !device().is_cpu() && pinned_host_allocator() != nullptr;
  auto storage = pin ? std::make_shared<Storage>(nbytes(), target, Storage::PinnedHost{"Tensor::to"})
                     : std::make_shared<Storage>(nbytes(), target);
  Tensor out = Tensor::view_of(std::move(storage), 0, shape(), contiguous_strides(shape()), dtype());
  if (numel() != 0) copy(*this, out, stream, non_blocking);
  // Recorded as a copy: gradients flow back across devices (mirrored replicas).
  const Tensor in[1] = {*this}, outs[1] = {out};
  record_op(OpId::Copy, OpAttrs{}, in, outs);
  return out;
}

Tensor Tensor::pin_memory() const {
  STRATA_CHECK(device().is_cpu(), "Tensor::pin_memory: only CPU tensors can be pinned; this ",
               shape_str(shape()), " ", dtype(), " tensor is on ", device());
  if (is_pinned()) return *this;
  Tensor out = Tensor::view_of(std::make_shared<Storage>(nbytes(), device(), Storage::PinnedHost{"Tensor::pin_memory"}),
                               0, shape(), contiguous_strides(shape()), dtype());
  out.copy_(*this);
  // Recorded as a copy, as clone(): gradients flow through.
  const Tensor in[1] = {*this}, outs[1] = {out};
  record_op(OpId::Copy, OpAttrs{}, in, outs);
  return out;
}

bool Tensor::is_pinned() const { return defined() && impl().storage != nullptr && impl().storage->pinned(); }

void Tensor::copy_(const Tensor& src) const {
  for (size_t d = 0; d < shape().size(); ++d) {
    STRATA_CHECK(strides()[d] != 0 || shape()[d] <= 1, "copy_: cannot write into ",
                 shape_str(shape()), ": it is a broadcast view whose elements share memory");
  }
  // Reading from the memory being written (x.copy_(x.transpose())) needs a snapshot first.
  Tensor value = src.defined() && src.shares_storage(*this) ? src.clone() : src;
  if (value.dtype() != dtype()) value = strata::cast(value, dtype());
  if (value.shape() != shape()) value = strata::broadcast_to(value, shape());
  if (!same_memory(value.device(), device())) value = value.to(device());
  OpAttrs attrs;
  const Tensor in[1] = {value};
  const Tensor out[1] = {*this};
  if (storage()) storage()->bump_version();
  run_kernel(OpId::Copy, attrs, in, out);
}

namespace detail {

void convert_elements(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (n <= 0) return;  // an empty std::vector's data() may be null: no memcpy from it
  if (from == to) {
    std::memcpy(dst, src, size_t(n) * dtype_size(from));
    return;
  }
  visit_dtype(from, [&](auto s) {
    using S = decltype(s);
    const S* in = static_cast<const S*>(src);
    visit_dtype(to, [&](auto d) {
      using D = decltype(d);
      D* out = static_cast<D*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<D, bool>) {
          // Compare in the source type: float(1e-50) would be 0 and turn true into false.
          if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) {
            out[i] = float(in[i]) != 0.0f;
          } else {
            out[i] = in[i] != S(0);
          }
        } else if constexpr (std::is_integral_v<D> &&
                             (std::is_floating_point_v<S> || std::is_same_v<S, Half> ||
                              std::is_same_v<S, BFloat16>)) {
          out[i] = float_to_int<D>(double(in[i]));
        } else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) {
          out[i] = D(float(in[i]));
        } else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) {
          out[i] = D(float(in[i]));
        } else {
          out[i] = static_cast<D>(in[i]);
        }
      }
    });
  });
}

void copy_to_host(const Tensor& t, void* dst) {
  // A device tensor comes over through the registered copy, which synchronises (the host
  // read is where deferred data errors of that device surface).
  Tensor c = t.device().is_cpu() ? t.contiguous() : t.to(Device());
  if (c.nbytes()) std::memcpy(dst, c.raw_data(), c.nbytes());
}

}  // namespace detail

// ---- printing ----

namespace {

enum class ValueKind { Float, Int, Bool };

void print_value(std::ostream& os, double x, ValueKind kind) {
  if (kind == ValueKind::Bool) {
    os << (x != 0 ? "True" : "False");
  } else if (kind == ValueKind::Int) {
    os << int64_t(x);
  } else if (std::isnan(x)) {
    os << "nan";
  } else if (std::isinf(x)) {
    os << (x > 0 ? "inf" : "-inf");
  } else {
    os << x;
  }
}

// A summarised axis (more than 6 elements) prints only its first and last three.
bool summarised_axis(int64_t n, bool summarise) { return summarise && n > 6; }

// The values operator<< prints, row-major over `printed` (the shape with each summarised
// axis cut to 6: its first and last three). A summary reads only those elements, as the
// 2^k strided blocks of the k summarised axes' heads and tails; copying every element of
// a broadcast view of 2^40 elements to print 36 of them threw std::bad_alloc.
std::vector<double> printed_values(const Tensor& t, bool summarise, Shape& printed) {
  const size_t rank = t.shape().size();
  printed = t.shape();
  std::vector<size_t> cut;
  for (size_t d = 0; d < rank; ++d) {
    if (summarised_axis(printed[d], summarise)) {
      printed[d] = 6;
      cut.push_back(d);
    }
  }
  if (cut.empty()) return t.to_vector<double>();
  std::vector<double> v(size_t(numel_of(printed)));
  const Strides dst_strides = contiguous_strides(printed);
  for (uint64_t mask = 0; mask < (uint64_t(1) << cut.size()); ++mask) {
    Shape block = printed;
    int64_t offset = t.offset(), dst_base = 0;
    for (size_t c = 0; c < cut.size(); ++c) {
      const size_t d = cut[c];
      block[d] = 3;
      if ((mask >> c) & 1) {
        offset += (t.shape()[d] - 3) * t.strides()[d];
        dst_base += 3 * dst_strides[d];
      }
    }
    const std::vector<double> b =
        Tensor::view_of(t.storage(), offset, block, t.strides(), t.dtype()).to_vector<double>();
    std::vector<int64_t> idx(rank, 0);
    for (size_t i = 0; i < b.size(); ++i) {
      int64_t dst = dst_base;
      for (size_t d = 0; d < rank; ++d) dst += idx[d] * dst_strides[d];
      v[size_t(dst)] = b[i];
      for (size_t d = rank; d-- > 0;) {
        if (++idx[d] < block[d]) break;
        idx[d] = 0;
      }
    }
  }
  return v;
}

// Prints the values `v` of printed_values (strides over its printed shape) for `shape`.
void print_rec(std::ostream& os, const std::vector<double>& v, const Shape& shape,
               const Strides& strides, size_t dim, int64_t base, bool summarise, ValueKind kind,
               int indent) {
  const int64_t n = shape[dim];
  os << '[';
  auto emit = [&](int64_t i) {
    // Index i of a summarised axis is at i, or among the last three of its 6 printed ones.
    const int64_t at = summarised_axis(n, summarise) && i >= 3 ? i - (n - 6) : i;
    if (dim + 1 == shape.size()) {
      print_value(os, v[size_t(base + at * strides[dim])], kind);
    } else {
      print_rec(os, v, shape, strides, dim + 1, base + at * strides[dim], summarise, kind,
                indent + 1);
    }
  };
  const std::string sep = dim + 1 == shape.size() ? ", " : (",\n" + std::string(size_t(indent + 1), ' '));
  for (int64_t i = 0; i < n; ++i) {
    if (summarise && n > 6 && i == 3) {
      os << "..." << sep;
      i = n - 3;
    }
    emit(i);
    if (i + 1 < n) os << sep;
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  const bool summarise = t.numel() > 1000;
  Shape printed;
  const std::vector<double> v = printed_values(t, summarise, printed);
  const ValueKind kind = t.dtype() == kBool        ? ValueKind::Bool
                         : is_floating(t.dtype()) ? ValueKind::Float
                                                  : ValueKind::Int;
  // Format into a local stream so the caller's stream keeps its own flags and precision.
  std::ostringstream body;
  body << std::setprecision(6);
  body << "tensor(";
  if (t.ndim() == 0) {
    print_value(body, v[0], kind);
  } else {
    print_rec(body, v, t.shape(), contiguous_strides(printed), 0, 0, summarise, kind, 7);
  }
  body << ", shape=" << shape_str(t.shape()) << ", dtype=" << t.dtype();
  if (!(t.device() == Device())) body << ", device=" << t.device();
  body << ')';
  return os << body.str();
}

}  // namespace strata
