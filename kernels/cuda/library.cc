// Helpers of the library-backed kernels (kernels/cuda/library.h) and the backend's
// numerical settings (kernels/cuda/settings.h).
#include <strata/kernels/cuda/library.h>

#include <cuda_runtime_api.h>

#include <atomic>

#include <strata/core/allocator.h>
#include <strata/core/contiguous.h>
#include <strata/core/dispatch.h>
#include <strata/core/error.h>
#include <strata/kernels/cuda/check.h>
#include <strata/kernels/cuda/launch.h>
#include <strata/kernels/cuda/settings.h>

namespace strata::backends::cuda {

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace strata::backends::cuda

namespace strata::cuda_backend {

Workspace::Workspace(size_t bytes, Device device, const Stream& stream) : bytes_(bytes), device_(device) {
  if (bytes > 0) ptr_ = allocator_for(DeviceType::CUDA).allocate(bytes, device, stream);
}

Workspace::~Workspace() {
  if (ptr_ != nullptr) allocator_for(DeviceType::CUDA).deallocate(ptr_, bytes_, device_);
}

Tensor strided_view(const Tensor& base, const Shape& shape, const Strides& strides) {
  return Tensor::view_of(base.storage(), base.offset(), shape, strides, base.dtype());
}

void copy_into(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  const Tensor in[1] = {src}, out[1] = {dst};
  run_kernel(OpId::Copy, OpAttrs{}, in, out);
}

Tensor contiguous_on_device(const Tensor& t) { return contiguous_untaped(t); }

void fill_zero(const Tensor& t, const Stream& stream) {
  if (t.numel() == 0) return;
  if (t.is_contiguous()) {
    set_device(t.device().index);
    STRATA_CUDA_CHECK("fill_zero", cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), native_stream(stream)));
    return;
  }
  Tensor z = Tensor::empty(t.shape(), t.dtype(), t.device());
  fill_zero(z, stream);
  copy_into(z, t);
}

uint32_t alignment_of(const void* ptr, int64_t stride_bytes) {
  uint64_t bits = uint64_t(reinterpret_cast<uintptr_t>(ptr)) | 256u;
  if (stride_bytes != 0) bits |= uint64_t(stride_bytes < 0 ? -stride_bytes : stride_bytes);
  return uint32_t(bits & (~bits + 1));  // lowest set bit
}

}  // namespace strata::cuda_backend
