// Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter on CUDA through cuDNN's legacy
// convolution API (host C++; no device code). Pooling is hand-written (pool.cuh).
//
// Semantics are the CPU's (kernels/cpu/conv.cc, core/ops_nn.cc): NHWC activations, HWIO
// filters, cross-correlation, strides, VALID or TensorFlow's SAME padding.
//
// - Layouts. cuDNN reads NHWC activations as they are (CUDNN_TENSOR_NHWC), but its filters
//   are KCRS (NCHW format) or KRSC (NHWC format, i.e. OHWI) -- never HWIO. An HWIO filter,
//   read as a [kh*kw*i, o] matrix, is the transpose of OHWI's [o, kh*kw*i], so each call
//   copies the filter once into an OHWI buffer (Conv2D, Conv2DBackpropInput), or has cuDNN
//   write the filter gradient into one and copies it out as HWIO (Conv2DBackpropFilter):
//   one extra pass over filter-sized memory per call (2.4 MB for a 3x3x256x256 float32
//   filter, ~1-2 us at H100 bandwidth), small next to the convolution itself. The copies go
//   through the backend's strided Copy kernel. float64 runs in NCHW (activations copied to
//   and from NCHW, filters to KCRS), because cuDNN has no float64 NHWC convolution (PyTorch
//   also runs float64 convolutions in NCHW); it is a correctness path, not a fast one.
// - Padding. cuDNN pads symmetrically; TensorFlow's SAME padding puts the odd extra
//   row/column at the bottom/right (conv_output_axis: pad_before = total / 2). When the
//   total is odd the input is copied once into a buffer one row and/or column larger (zero
//   filled), and cuDNN pads that symmetrically by pad_before -- which is exactly the CPU's
//   geometry (TensorFlow's GPU kernels do the same). The backward-input pass computes the
//   gradient of that padded input and copies out its top-left [H, W] part; the
//   backward-filter pass reads the same padded input. The output extent cuDNN derives is
//   checked against the front-end's.
// - Numerics. float32 computes in float32 (CUDNN_FMA_MATH: no TF32) unless
//   strata::backends::cuda::set_allow_tf32(true); float16/bfloat16 compute in float32 on
//   tensor cores (the CPU casts to float32, convolves and rounds once); float64 in float64.
//   Where cuDNN has no float16/bfloat16 algorithm for a shape (its half-type kernels want,
//   e.g., channel counts that are multiples of 8), the op runs as the CPU does: inputs cast
//   to float32, a float32 convolution, the result rounded once. Results differ from the
//   CPU's in summation order, and in rounding for the transform-based algorithms cuDNN may
//   pick (Winograd, FFT).
// - Algorithms. cudnnGet*Algorithm_v7's heuristics, per shape (dims, pads, strides, dtype,
//   TF32 switch, device) cached: the first deterministic algorithm that the workspace query
//   accepts, else the first non-deterministic one, so repeated runs give the same bits.
//   Workspace from the caching allocator on the op's stream. One cuDNN handle per (thread,
//   device), from a pool; descriptors are RAII-wrapped and made per call (host-only).
#if !defined(STRATA_CUDA_NO_CUDNN)
#include <cudnn.h>  // before check.h (through the strata headers): it defines STRATA_CUDNN_CHECK
#endif
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <compare>
#include <map>
#include <mutex>
#include <vector>

#include <strata/core/dispatch.h>
#include <strata/core/error.h>
#include <strata/core/ops.h>
#include <strata/core/tensor.h>
#include <strata/kernels/cuda/check.h>
#include <strata/kernels/cuda/launch.h>
#include <strata/kernels/cuda/library.h>
#include <strata/kernels/cuda/settings.h>

namespace strata::cuda_kernels {

#if defined(STRATA_CUDA_NO_CUDNN)

namespace {
void conv_unavailable(const KernelArgs& k) {
  fail(op_name(k.op), ": this build of strata's CUDA backend has no cuDNN (set STRATA_CUDNN_INCLUDE_DIR and "
       "STRATA_CUDNN_LIBRARY when configuring); run convolutions on the CPU");
}
}  // namespace

void register_cuda_conv() {
  for (OpId op : {OpId::Conv2D, OpId::Conv2DBackpropInput, OpId::Conv2DBackpropFilter}) {
    register_kernel(op, DeviceType::CUDA, conv_unavailable);
  }
}

#else

namespace {

using cuda_backend::copy_into;
using cuda_backend::fill_zero;
using cuda_backend::strided_view;

cudnnHandle_t create_handle(int device) {
  cuda_backend::set_device(device);
  cudnnHandle_t h = nullptr;
  STRATA_CUDNN_CHECK("conv2d", cudnnCreate(&h));
  return h;
}

cuda_backend::HandlePool<cudnnHandle_t>& handles() {
  static auto* pool = new cuda_backend::HandlePool<cudnnHandle_t>(create_handle);
  return *pool;
}

// ---- RAII descriptors ----

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  explicit TensorDesc(const char* op) { STRATA_CUDNN_CHECK(op, cudnnCreateTensorDescriptor(&d)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  explicit FilterDesc(const char* op) { STRATA_CUDNN_CHECK(op, cudnnCreateFilterDescriptor(&d)); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  explicit ConvDesc(const char* op) { STRATA_CUDNN_CHECK(op, cudnnCreateConvolutionDescriptor(&d)); }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// ---- types and geometry ----

struct DnnTypes {
  cudnnDataType_t data;
  cudnnDataType_t compute;
  cudnnMathType_t math;  // set before the heuristics
  bool nchw;             // float64: cuDNN runs NCHW only
  bool fma_only;         // float32 without TF32: only CUDNN_FMA_MATH algorithms
};

DnnTypes types_for(DType dt, const char* op) {
  const bool tf32 = strata::backends::cuda::allow_tf32();
  switch (dt) {
    case DType::Float32:
      return {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH, false, !tf32};
    case DType::Float16:
      return {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH, false, false};
    case DType::BFloat16:
      return {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH, false, false};
    case DType::Float64:
      return {CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH, true, false};
    default:
      break;
  }
  fail(op, ": no CUDA kernel for dtype ", dt);
}

struct Geometry {
  int64_t n, h, w, c;     // input
  int64_t kh, kw, o;      // filter
  int64_t oh, ow;         // output
  int64_t sh, sw, ph, pw; // strides and leading (= symmetric cuDNN) pads
  int64_t eh, ew;         // extra bottom row / right column of odd SAME padding (0 or 1)
};

// As the CPU's geometry(), plus the asymmetric part of SAME padding.
Geometry geometry(const Shape& x, const Shape& w, const OpAttrs& a, const char* op) {
  Geometry g;
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  g.kh = w[0], g.kw = w[1], g.o = w[3];
  g.sh = a.strides[0], g.sw = a.strides[1];
  const ConvAxis ah = conv_output_axis(g.h, g.kh, g.sh, a.padding, op);
  const ConvAxis aw = conv_output_axis(g.w, g.kw, g.sw, a.padding, op);
  g.oh = ah.out, g.ow = aw.out, g.ph = ah.pad_before, g.pw = aw.pad_before;
  g.eh = g.ew = 0;
  if (a.padding == Padding::Same) {
    const int64_t th = std::max<int64_t>((g.oh - 1) * g.sh + g.kh - g.h, 0);
    const int64_t tw = std::max<int64_t>((g.ow - 1) * g.sw + g.kw - g.w, 0);
    g.eh = th - 2 * g.ph;  // pad_after - pad_before
    g.ew = tw - 2 * g.pw;
  }
  return g;
}

// Strides, in (n, h, w, c) order, of a packed image buffer of extents n x h x w x c.
Strides image_strides(bool nchw, int64_t h, int64_t w, int64_t c) {
  if (nchw) return {c * h * w, w, 1, h * w};
  return {h * w * c, w * c, c, 1};
}
Shape image_buffer_shape(bool nchw, int64_t n, int64_t h, int64_t w, int64_t c) {
  return nchw ? Shape{n, c, h, w} : Shape{n, h, w, c};
}
// Strides, in HWIO order, of a packed filter buffer (OHWI, or OIHW for NCHW).
Strides filter_strides(bool nchw, int64_t kh, int64_t kw, int64_t c) {
  if (nchw) return {kw, 1, kh * kw, c * kh * kw};
  return {kw * c, c, 1, kh * kw * c};
}
Shape filter_buffer_shape(bool nchw, int64_t kh, int64_t kw, int64_t c, int64_t o) {
  return nchw ? Shape{o, c, kh, kw} : Shape{o, kh, kw, c};
}

// cuDNN's descriptors carry no alignment, so tensors it reads or writes in place are kept
// 16-byte aligned (a view at an odd offset is copied, as a fresh buffer always is).
bool aligned(const Tensor& t) { return cuda_backend::alignment_of(t.raw_data()) >= 16; }

// x (NHWC, any strides) as cuDNN reads it: packed in the layout, with `eh` zero rows and
// `ew` zero columns appended. x itself when that is already the case.
Tensor image_in(const Tensor& x, bool nchw, int64_t eh, int64_t ew, const Stream& stream) {
  if (!nchw && eh == 0 && ew == 0 && x.is_contiguous() && aligned(x)) return x;
  const int64_t n = x.dim(0), h = x.dim(1) + eh, w = x.dim(2) + ew, c = x.dim(3);
  Tensor buf = Tensor::empty(image_buffer_shape(nchw, n, h, w, c), x.dtype(), x.device());
  if (eh > 0 || ew > 0) fill_zero(buf, stream);
  copy_into(x, strided_view(buf, x.shape(), image_strides(nchw, h, w, c)));
  return buf;
}

// Where cuDNN writes an NHWC result `out` that is `eh`/`ew` rows/columns larger: out itself
// when it can, else a buffer that image_out_finish copies into out.
Tensor image_out(const Tensor& out, bool nchw, int64_t eh, int64_t ew) {
  if (!nchw && eh == 0 && ew == 0 && out.is_contiguous() && aligned(out)) return out;
  return Tensor::empty(image_buffer_shape(nchw, out.dim(0), out.dim(1) + eh, out.dim(2) + ew, out.dim(3)),
                       out.dtype(), out.device());
}
void image_out_finish(const Tensor& buf, const Tensor& out, bool nchw, int64_t eh, int64_t ew) {
  if (buf.storage() == out.storage() && buf.offset() == out.offset()) return;
  copy_into(strided_view(buf, out.shape(), image_strides(nchw, out.dim(1) + eh, out.dim(2) + ew, out.dim(3))), out);
}

// An HWIO filter copied into cuDNN's filter layout.
Tensor filter_in(const Tensor& w, bool nchw) {
  const int64_t kh = w.dim(0), kw = w.dim(1), c = w.dim(2), o = w.dim(3);
  Tensor buf = Tensor::empty(filter_buffer_shape(nchw, kh, kw, c, o), w.dtype(), w.device());
  copy_into(w, strided_view(buf, w.shape(), filter_strides(nchw, kh, kw, c)));
  return buf;
}

int to_int(int64_t v, const char* op) {
  STRATA_CHECK(v <= INT_MAX, op, ": extent ", v, " exceeds what cuDNN accepts (2^31 - 1)");
  return int(v);
}

// ---- descriptors and algorithm choice ----

enum class Pass { Forward, BackwardData, BackwardFilter };

struct ConvKey {
  int device, pass, data, tf32;
  int64_t n, c, h, w, o, kh, kw, oh, ow, ph, pw, sh, sw;
  auto operator<=>(const ConvKey&) const = default;
};

struct AlgoChoice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<ConvKey, AlgoChoice>& algo_cache() {
  static auto* cache = new std::map<ConvKey, AlgoChoice>();
  return *cache;
}

// The descriptors of one convolution: x [n, c, h+eh, w+ew], w [o, c, kh, kw], y [n, o, oh, ow].
struct Problem {
  const char* op;
  Pass pass;
  Geometry g;
  DnnTypes t;
  int device;
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;

  Problem(const char* op_, Pass pass_, const Geometry& g_, const DnnTypes& t_, int device_)
      : op(op_), pass(pass_), g(g_), t(t_), device(device_), x(op_), y(op_), w(op_), conv(op_) {
    const cudnnTensorFormat_t fmt = t.nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
    STRATA_CUDNN_CHECK(op, cudnnSetTensor4dDescriptor(x.d, fmt, t.data, to_int(g.n, op), to_int(g.c, op),
                                                      to_int(g.h + g.eh, op), to_int(g.w + g.ew, op)));
    STRATA_CUDNN_CHECK(op, cudnnSetTensor4dDescriptor(y.d, fmt, t.data, to_int(g.n, op), to_int(g.o, op),
                                                      to_int(g.oh, op), to_int(g.ow, op)));
    STRATA_CUDNN_CHECK(op, cudnnSetFilter4dDescriptor(w.d, t.data, fmt, to_int(g.o, op), to_int(g.c, op),
                                                      to_int(g.kh, op), to_int(g.kw, op)));
    STRATA_CUDNN_CHECK(op, cudnnSetConvolution2dDescriptor(conv.d, to_int(g.ph, op), to_int(g.pw, op),
                                                           to_int(g.sh, op), to_int(g.sw, op), 1, 1,
                                                           CUDNN_CROSS_CORRELATION, t.compute));
    STRATA_CUDNN_CHECK(op, cudnnSetConvolutionMathType(conv.d, t.math));
    int n = 0, c = 0, h = 0, wd = 0;
    STRATA_CUDNN_CHECK(op, cudnnGetConvolution2dForwardOutputDim(conv.d, x.d, w.d, &n, &c, &h, &wd));
    STRATA_CHECK(n == g.n && c == g.o && h == g.oh && wd == g.ow, op,
                 ": internal error: cuDNN's output extent [", n, ",", c, ",", h, ",", wd,
                 "] (NCHW) differs from the front-end's [", g.n, ",", g.o, ",", g.oh, ",", g.ow, "]");
    for (int64_t e : {g.n * g.c * (g.h + g.eh) * (g.w + g.ew), g.n * g.o * g.oh * g.ow, g.o * g.c * g.kh * g.kw}) {
      STRATA_CHECK(e <= INT_MAX, op, ": a tensor of ", e, " elements exceeds what cuDNN's convolutions accept "
                   "(2^31 - 1)");
    }
  }

  ConvKey key() const {
    return {device, int(pass), int(t.data), t.fma_only ? 0 : 1, g.n, g.c, g.h + g.eh, g.w + g.ew, g.o, g.kh, g.kw,
            g.oh, g.ow, g.ph, g.pw, g.sh, g.sw};
  }

  // Workspace bytes of `algo` under the descriptor's current math type; false when cuDNN
  // does not support it.
  bool workspace_of(cudnnHandle_t h, int algo, size_t* bytes) const {
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    switch (pass) {
      case Pass::Forward:
        st = cudnnGetConvolutionForwardWorkspaceSize(h, x.d, w.d, conv.d, y.d, cudnnConvolutionFwdAlgo_t(algo), bytes);
        break;
      case Pass::BackwardData:
        st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, w.d, y.d, conv.d, x.d,
                                                          cudnnConvolutionBwdDataAlgo_t(algo), bytes);
        break;
      case Pass::BackwardFilter:
        st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x.d, y.d, conv.d, w.d,
                                                            cudnnConvolutionBwdFilterAlgo_t(algo), bytes);
        break;
    }
    return st == CUDNN_STATUS_SUCCESS;
  }

  // The algorithm for this problem (cached per shape); algo < 0 when cuDNN has none.
  AlgoChoice choose(cudnnHandle_t h) {
    const ConvKey k = key();
    {
      std::lock_guard<std::mutex> lock(cache_mutex());
      auto it = algo_cache().find(k);
      if (it != algo_cache().end()) return it->second;
    }
    struct Candidate {
      int algo;
      cudnnStatus_t status;
      cudnnDeterminism_t determinism;
      cudnnMathType_t math;
    };
    std::vector<Candidate> cands;
    int got = 0;
    switch (pass) {
      case Pass::Forward: {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        STRATA_CUDNN_CHECK(op, cudnnGetConvolutionForwardAlgorithm_v7(h, x.d, w.d, conv.d, y.d,
                                                                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
        for (int i = 0; i < got; ++i) {
          cands.push_back({int(perf[i].algo), perf[i].status, perf[i].determinism, perf[i].mathType});
        }
        break;
      }
      case Pass::BackwardData: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        STRATA_CUDNN_CHECK(op, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                   h, w.d, y.d, conv.d, x.d, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
        for (int i = 0; i < got; ++i) {
          cands.push_back({int(perf[i].algo), perf[i].status, perf[i].determinism, perf[i].mathType});
        }
        break;
      }
      case Pass::BackwardFilter: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        STRATA_CUDNN_CHECK(op, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                   h, x.d, y.d, conv.d, w.d, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
        for (int i = 0; i < got; ++i) {
          cands.push_back({int(perf[i].algo), perf[i].status, perf[i].determinism, perf[i].mathType});
        }
        break;
      }
    }
    AlgoChoice choice;
    choice.algo = -1;
    for (int round = 0; round < 2 && choice.algo < 0; ++round) {
      for (const Candidate& c : cands) {
        if (c.status != CUDNN_STATUS_SUCCESS) continue;
        if (round == 0 && c.determinism != CUDNN_DETERMINISTIC) continue;
        cudnnMathType_t math = c.math;
        if (t.fma_only) {  // float32 without TF32: plain FMA kernels only
          if (math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
          math = CUDNN_FMA_MATH;
        }
        STRATA_CUDNN_CHECK(op, cudnnSetConvolutionMathType(conv.d, math));
        size_t bytes = 0;
        if (!workspace_of(h, c.algo, &bytes)) continue;
        choice = {c.algo, math, bytes};
        break;
      }
    }
    std::lock_guard<std::mutex> lock(cache_mutex());
    algo_cache().emplace(k, choice);
    return choice;
  }

  [[noreturn]] void no_algorithm() const {
    fail(op, ": cuDNN offers no algorithm for input [", g.n, ",", g.h, ",", g.w, ",", g.c, "] (NHWC), filter [",
         g.kh, ",", g.kw, ",", g.c, ",", g.o, "] (HWIO), strides ", g.sh, ",", g.sw, ", pads ", g.ph, ",", g.pw,
         " in cudnnDataType_t ", int(t.data), " on cuda:", device);
  }
};

// A problem bound to the calling thread's handle on `stream` and its algorithm.
struct Plan {
  cudnnHandle_t handle = nullptr;
  AlgoChoice choice;
  bool ok() const { return choice.algo >= 0; }
};

Plan plan(Problem& p, const Stream& stream) {
  cuda_backend::set_device(p.device);
  Plan pl;
  pl.handle = handles().get(p.device);
  STRATA_CUDNN_CHECK(p.op, cudnnSetStream(pl.handle, cuda_backend::native_stream(stream)));
  pl.choice = p.choose(pl.handle);
  return pl;
}

bool half_type(const Problem& p) { return p.t.data == CUDNN_DATA_HALF || p.t.data == CUDNN_DATA_BFLOAT16; }

// Runs one pass: `a` and `b` are the two inputs in cuDNN's argument order, `out` the output.
// Returns false, having written nothing, when cuDNN refuses a half-type problem at run time
// (CUDNN_STATUS_NOT_SUPPORTED): the caller then runs it in float32, as it will from now on.
bool run_pass(Problem& p, const Plan& pl, const Stream& stream, const void* a, const void* b, void* out) {
  const cudnnHandle_t h = pl.handle;
  STRATA_CUDNN_CHECK(p.op, cudnnSetConvolutionMathType(p.conv.d, pl.choice.math));
  const cuda_backend::Workspace ws(pl.choice.workspace, stream.device(), stream);
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool dbl = p.t.compute == CUDNN_DATA_DOUBLE;
  const void* one = dbl ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = dbl ? static_cast<const void*>(&zero_d) : &zero_f;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const char* call = "";
  switch (p.pass) {
    case Pass::Forward:
      call = "cudnnConvolutionForward(...)";
      st = cudnnConvolutionForward(h, one, p.x.d, a, p.w.d, b, p.conv.d, cudnnConvolutionFwdAlgo_t(pl.choice.algo),
                                   ws.get(), ws.bytes(), zero, p.y.d, out);
      break;
    case Pass::BackwardData:
      call = "cudnnConvolutionBackwardData(...)";
      st = cudnnConvolutionBackwardData(h, one, p.w.d, a, p.y.d, b, p.conv.d,
                                        cudnnConvolutionBwdDataAlgo_t(pl.choice.algo), ws.get(), ws.bytes(), zero,
                                        p.x.d, out);
      break;
    case Pass::BackwardFilter:
      call = "cudnnConvolutionBackwardFilter(...)";
      st = cudnnConvolutionBackwardFilter(h, one, p.x.d, a, p.y.d, b, p.conv.d,
                                          cudnnConvolutionBwdFilterAlgo_t(pl.choice.algo), ws.get(), ws.bytes(), zero,
                                          p.w.d, out);
      break;
  }
  if (st == CUDNN_STATUS_SUCCESS) return true;
  if (st == CUDNN_STATUS_NOT_SUPPORTED && half_type(p)) {
    AlgoChoice none;
    none.algo = -1;
    std::lock_guard<std::mutex> lock(cache_mutex());
    algo_cache()[p.key()] = none;
    return false;
  }
  cuda_backend::fail_library(p.op, "cuDNN", call, int(st), cudnnGetErrorString(st), __FILE__, __LINE__);
}

// float16/bfloat16 where cuDNN has no algorithm (its half-type kernels want, e.g., channel
// counts that are multiples of 8): what the CPU does -- cast to float32, convolve in
// float32, round the result once.
void in_float32(const KernelArgs& k, KernelFn fn) {
  auto cast = [](const Tensor& src, const Tensor& dst) {
    OpAttrs a;
    a.dtype = dst.dtype();
    const Tensor in[1] = {src}, out[1] = {dst};
    run_kernel(OpId::Cast, a, in, out);
  };
  std::vector<Tensor> in32, out32;
  for (const Tensor& t : k.in) {
    in32.push_back(Tensor::empty(t.shape(), kFloat32, t.device()));
    cast(t, in32.back());
  }
  for (const Tensor& t : k.out) out32.push_back(Tensor::empty(t.shape(), kFloat32, t.device()));
  fn(KernelArgs{k.op, k.attrs, in32, out32, k.stream});
  for (size_t i = 0; i < out32.size(); ++i) cast(out32[i], k.out[i]);
}

// The plan of p, or false when a half-type problem must run in float32 instead.
bool planned(Problem& p, const Stream& stream, Plan* pl) {
  *pl = plan(p, stream);
  if (pl->ok()) return true;
  if (half_type(p)) return false;
  p.no_algorithm();
}

// ---- the kernels ----

void conv_forward(const KernelArgs& k) {
  const char* op = "conv2d";
  const Tensor &x = k.in[0], &w = k.in[1], &y = k.out[0];
  const Geometry g = geometry(x.shape(), w.shape(), k.attrs, op);
  if (y.numel() == 0) return;
  if (g.c == 0) return fill_zero(y, k.stream);  // an empty sum
  const DnnTypes t = types_for(y.dtype(), op);
  Problem p(op, Pass::Forward, g, t, y.device().index);
  Plan pl;
  if (!planned(p, k.stream, &pl)) return in_float32(k, conv_forward);
  const Tensor xb = image_in(x, t.nchw, g.eh, g.ew, k.stream);
  const Tensor wb = filter_in(w, t.nchw);
  const Tensor yb = image_out(y, t.nchw, 0, 0);
  if (!run_pass(p, pl, k.stream, xb.raw_data(), wb.raw_data(), yb.raw_data())) return in_float32(k, conv_forward);
  image_out_finish(yb, y, t.nchw, 0, 0);
}

void conv_backprop_input(const KernelArgs& k) {
  const char* op = "conv2d_backprop_input";
  const Tensor &w = k.in[0], &dy = k.in[1], &dx = k.out[0];
  const Geometry g = geometry(k.attrs.shape, w.shape(), k.attrs, op);
  if (dx.numel() == 0) return;
  if (g.o == 0 || g.oh * g.ow == 0) return fill_zero(dx, k.stream);
  const DnnTypes t = types_for(dx.dtype(), op);
  Problem p(op, Pass::BackwardData, g, t, dx.device().index);
  Plan pl;
  if (!planned(p, k.stream, &pl)) return in_float32(k, conv_backprop_input);
  const Tensor wb = filter_in(w, t.nchw);
  const Tensor dyb = image_in(dy, t.nchw, 0, 0, k.stream);
  const Tensor dxb = image_out(dx, t.nchw, g.eh, g.ew);
  if (!run_pass(p, pl, k.stream, wb.raw_data(), dyb.raw_data(), dxb.raw_data())) {
    return in_float32(k, conv_backprop_input);
  }
  image_out_finish(dxb, dx, t.nchw, g.eh, g.ew);
}

void conv_backprop_filter(const KernelArgs& k) {
  const char* op = "conv2d_backprop_filter";
  const Tensor &x = k.in[0], &dy = k.in[1], &dw = k.out[0];
  const Geometry g = geometry(x.shape(), k.attrs.shape, k.attrs, op);
  if (dw.numel() == 0) return;
  if (g.n == 0 || g.oh * g.ow == 0) return fill_zero(dw, k.stream);
  const DnnTypes t = types_for(dw.dtype(), op);
  Problem p(op, Pass::BackwardFilter, g, t, dw.device().index);
  Plan pl;
  if (!planned(p, k.stream, &pl)) return in_float32(k, conv_backprop_filter);
  const Tensor xb = image_in(x, t.nchw, g.eh, g.ew, k.stream);
  const Tensor dyb = image_in(dy, t.nchw, 0, 0, k.stream);
  const Tensor dwb = Tensor::empty(filter_buffer_shape(t.nchw, g.kh, g.kw, g.c, g.o), dw.dtype(), dw.device());
  if (!run_pass(p, pl, k.stream, xb.raw_data(), dyb.raw_data(), dwb.raw_data())) {
    return in_float32(k, conv_backprop_filter);
  }
  copy_into(strided_view(dwb, dw.shape(), filter_strides(t.nchw, g.kh, g.kw, g.c)), dw);
}

}  // namespace

void register_cuda_conv() {
  register_kernel(OpId::Conv2D, DeviceType::CUDA, conv_forward);
  register_kernel(OpId::Conv2DBackpropInput, DeviceType::CUDA, conv_backprop_input);
  register_kernel(OpId::Conv2DBackpropFilter, DeviceType::CUDA, conv_backprop_filter);
}

#endif  // STRATA_CUDA_NO_CUDNN

}  // namespace strata::cuda_kernels
