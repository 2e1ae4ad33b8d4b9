// MatMul on CUDA through cuBLASLt (host C++; no device code).
//
// Semantics are those of the CPU kernel (kernels/cpu/linalg.cc) and the front-end
// (core/ops_nn.cc matmul): out[..., m, n] = op(a)[..., m, k] @ op(b)[..., k, n] with the
// batch dimensions broadcast, transpose_a/transpose_b, float16/bfloat16 computed in float32.
//
// - Layout. strata is row-major and cuBLASLt column-major: the product is computed as
//   out^T = op(b)^T op(a)^T, so b is cuBLASLt's A and a its B, and no data moves. An
//   operand whose last two axes are row- or column-major with a leading dimension
//   (transposes, row slices) is passed as it is, with its transpose flag flipped for
//   column-major storage, exactly as the CPU's `prepare` decides; any other operand (a
//   step-2 column slice, a broadcast inside the matrix) is copied to contiguous once.
// - Batches. The output's batch dimensions are coalesced (size-1 axes dropped, neighbours
//   merged where every operand's strides allow), the innermost group is one strided-batched
//   cuBLASLt call (a broadcast operand has batch stride 0), and any outer group that cannot
//   be merged (e.g. [2,1,m,k] @ [3,k,n]) loops over such calls. A batched left operand times a
//   broadcast right operand ([B,m,k] @ [k,n], a dense layer on a sequence) is folded into one
//   GEMM with M = B*m, as PyTorch does.
// - Types. float32 computes in float32 (CUBLAS_COMPUTE_32F), or in TF32 on tensor cores when
//   strata::backends::cuda::set_allow_tf32(true) (kernels/cuda/settings.h); float64 in float64;
//   float16/bfloat16 operands accumulate in float32 (CUBLAS_COMPUTE_32F) and round once,
//   with split-K reductions kept in float32 too (no reduction in the output type), which is
//   what the CPU computes up to summation order. Integer matmul raises: cuBLAS has no
//   general int32/int64 GEMM (CLARIFICATIONS: "integer matmul is not required on the GPU").
// - Handles, algorithms, workspace. One cuBLASLt handle per (thread, device) from a pool
//   (kernels/cuda/library.h); descriptors live on the stack (the *Init variants); the
//   heuristic's algorithm is cached per shape key (sizes, transposes, leading dimensions,
//   batch count and strides, pointer alignments, types); its workspace (up to 32 MiB, as
//   NVIDIA recommends for Hopper) comes from the caching allocator on the op's stream.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <compare>
#include <map>
#include <mutex>
#include <vector>

#include <strata/core/dispatch.h>
#include <strata/core/error.h>
#include <strata/core/tensor.h>
#include <strata/kernels/cuda/check.h>
#include <strata/kernels/cuda/launch.h>
#include <strata/kernels/cuda/library.h>
#include <strata/kernels/cuda/settings.h>
#include <strata/kernels/matmul_operand.h>

namespace strata::cuda_kernels {

namespace {

using cuda_backend::alignment_of;
using cuda_backend::contiguous_on_device;
using cuda_backend::native_stream;

constexpr const char* kOp = "matmul";
constexpr uint64_t kMaxWorkspace = uint64_t(32) << 20;

cublasLtHandle_t create_handle(int device) {
  cuda_backend::set_device(device);
  cublasLtHandle_t h = nullptr;
  STRATA_CUBLASLT_CHECK(kOp, cublasLtCreate(&h));
  return h;
}

cuda_backend::HandlePool<cublasLtHandle_t>& handles() {
  static auto* pool = new cuda_backend::HandlePool<cublasLtHandle_t>(create_handle);
  return *pool;
}

// ---- types ----

struct Types {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;
};

Types types_for(DType dt) {
  switch (dt) {
    case DType::Float32:
      return {CUDA_R_32F, strata::backends::cuda::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
              CUDA_R_32F};
    case DType::Float64:
      return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    case DType::Float16:
      return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::BFloat16:
      return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    default:
      break;
  }
  fail("matmul: no CUDA kernel for dtype ", dt,
       ": integer matmul is not supported on CUDA (cuBLAS has no general integer GEMM); run it on the "
       "CPU (.to(cpu(0))) or cast the operands to a float dtype");
}

// ---- operands ----

// One operand as the CPU sees it (kernels/matmul_operand.h): a matrix S stored row-major
// with leading dimension ld (S = X, or X^T when X's last two axes are column-major), batch
// strides broadcast to the output's batch shape.
using Operand = kernels::MatmulOperand;

Operand prepare(const Tensor& x, const Shape& batch) {
  return kernels::prepare_matmul_operand(x, batch, [](const Tensor& t) { return contiguous_on_device(t); });
}

// ---- one cuBLASLt call and its cached algorithm ----

// A column-major strided-batched product D[rows_d, cols_d] = op(A) op(B) (cuBLASLt's terms).
struct GemmShape {
  int dtype = 0;
  int compute = 0;
  int op_a = 0, op_b = 0;
  uint64_t a_rows = 0, a_cols = 0, b_rows = 0, b_cols = 0, d_rows = 0, d_cols = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  int32_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;
  uint32_t align_a = 0, align_b = 0, align_d = 0;
  int device = 0;
  auto operator<=>(const GemmShape&) const = default;
};

struct CachedAlgo {
  cublasLtMatmulAlgo_t algo;
  size_t workspace = 0;
};

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<GemmShape, CachedAlgo>& algo_cache() {
  static auto* cache = new std::map<GemmShape, CachedAlgo>();
  return *cache;
}

std::string describe(const GemmShape& g) {
  return detail::concat("cuBLASLt D[", g.d_rows, "x", g.d_cols, "] = ", g.op_a == CUBLAS_OP_T ? "T" : "N", "(A[",
                        g.a_rows, "x", g.a_cols, ", ld ", g.lda, "]) ", g.op_b == CUBLAS_OP_T ? "T" : "N", "(B[",
                        g.b_rows, "x", g.b_cols, ", ld ", g.ldb, "]), batch ", g.batch, ", cudaDataType ", g.dtype,
                        ", compute type ", g.compute);
}

// The descriptors of one call, on the stack.
struct Descriptors {
  cublasLtMatmulDescOpaque_t op_storage;
  cublasLtMatrixLayoutOpaque_t a_storage, b_storage, d_storage;
  cublasLtMatmulDesc_t op = &op_storage;
  cublasLtMatrixLayout_t a = &a_storage, b = &b_storage, d = &d_storage;

  explicit Descriptors(const GemmShape& g, cudaDataType_t scale) {
    const auto data = cudaDataType_t(g.dtype);
    STRATA_CUBLASLT_CHECK(kOp, cublasLtMatmulDescInit(op, cublasComputeType_t(g.compute), scale));
    const int32_t ta = g.op_a, tb = g.op_b;
    STRATA_CUBLASLT_CHECK(kOp, cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    STRATA_CUBLASLT_CHECK(kOp, cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    layout(a, data, g.a_rows, g.a_cols, g.lda, g.batch, g.stride_a);
    layout(b, data, g.b_rows, g.b_cols, g.ldb, g.batch, g.stride_b);
    layout(d, data, g.d_rows, g.d_cols, g.ldd, g.batch, g.stride_d);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  static void layout(cublasLtMatrixLayout_t l, cudaDataType_t data, uint64_t rows, uint64_t cols, int64_t ld,
                     int32_t batch, int64_t stride) {
    STRATA_CUBLASLT_CHECK(kOp, cublasLtMatrixLayoutInit(l, data, rows, cols, ld));
    if (batch > 1) {
      STRATA_CUBLASLT_CHECK(kOp, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                                sizeof batch));
      STRATA_CUBLASLT_CHECK(kOp, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                                &stride, sizeof stride));
    }
  }
};

CachedAlgo find_algo(cublasLtHandle_t handle, const GemmShape& g, const Descriptors& desc) {
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = algo_cache().find(g);
    if (it != algo_cache().end()) return it->second;
  }
  cublasLtMatmulPreferenceOpaque_t pref_storage;
  cublasLtMatmulPreference_t pref = &pref_storage;
  STRATA_CUBLASLT_CHECK(kOp, cublasLtMatmulPreferenceInit(pref));
  const uint64_t max_ws = kMaxWorkspace;
  STRATA_CUBLASLT_CHECK(kOp, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                &max_ws, sizeof max_ws));
  if (g.dtype == CUDA_R_16F || g.dtype == CUDA_R_16BF) {
    // Split-K partial sums stay in float32: no reduction in the half output type.
    const uint32_t mask = uint32_t(CUBLASLT_REDUCTION_SCHEME_MASK) & ~uint32_t(CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);
    STRATA_CUBLASLT_CHECK(kOp, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                                  &mask, sizeof mask));
  }
  const uint32_t aligns[4] = {g.align_a, g.align_b, g.align_d, g.align_d};
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    STRATA_CUBLASLT_CHECK(kOp, cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &aligns[i], sizeof aligns[i]));
  }
  cublasLtMatmulHeuristicResult_t results[8] = {};
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc.op, desc.a, desc.b, desc.d, desc.d, pref,
                                                           8, results, &returned);
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
    cuda_backend::fail_library(kOp, "cuBLASLt", "cublasLtMatmulAlgoGetHeuristic(...)", int(st),
                               cublasLtGetStatusString(st), __FILE__, __LINE__);
  }
  for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < returned; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    CachedAlgo found{results[i].algo, results[i].workspaceSize};
    std::lock_guard<std::mutex> lock(cache_mutex());
    algo_cache().emplace(g, found);
    return found;
  }
  fail("matmul: cuBLASLt has no algorithm for ", describe(g), " on cuda:", g.device);
}

void run_gemm(const GemmShape& g, cudaDataType_t scale, const void* a, const void* b, void* d,
              const Stream& stream) {
  cuda_backend::set_device(g.device);
  const cublasLtHandle_t handle = handles().get(g.device);
  const Descriptors desc(g, scale);
  const CachedAlgo algo = find_algo(handle, g, desc);
  const cuda_backend::Workspace ws(algo.workspace, stream.device(), stream);
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool dbl = scale == CUDA_R_64F;
  STRATA_CUBLASLT_CHECK(kOp, cublasLtMatmul(handle, desc.op, dbl ? static_cast<const void*>(&one_d) : &one_f, a,
                                          desc.a, b, desc.b, dbl ? static_cast<const void*>(&zero_d) : &zero_f, d,
                                          desc.d, d, desc.d, &algo.algo, ws.get(), ws.bytes(),
                                          native_stream(stream)));
}

// ---- the kernel ----

struct BatchDim {
  int64_t size, sa, sb, sc;  // extent and element strides of a, b and out
};

void matmul_kernel(const KernelArgs& k) {
  const Tensor& out_arg = k.out[0];
  const DType dt = out_arg.dtype();
  const Types types = types_for(dt);
  const Shape batch(out_arg.shape().begin(), out_arg.shape().end() - 2);
  const int64_t m = out_arg.dim(-2), n = out_arg.dim(-1);
  const bool ta = k.attrs.transpose_a, tb = k.attrs.transpose_b;
  const int64_t kk = ta ? k.in[0].dim(-2) : k.in[0].dim(-1);
  if (out_arg.numel() == 0) return;
  const Tensor out = out_arg.is_contiguous() ? out_arg : Tensor::empty(out_arg.shape(), dt, out_arg.device());
  if (kk == 0) {
    cuda_backend::fill_zero(out, k.stream);
  } else {
    const Operand A = prepare(k.in[0], batch), B = prepare(k.in[1], batch);
    const bool eff_ta = ta != A.trans, eff_tb = tb != B.trans;
    const int64_t esize = int64_t(dtype_size(dt));

    // Coalesced batch dimensions, outermost first.
    std::vector<BatchDim> dims;
    int64_t sc = m * n;
    std::vector<int64_t> out_strides(batch.size());
    for (size_t d = batch.size(); d-- > 0;) {
      out_strides[d] = sc;
      sc *= batch[d];
    }
    for (size_t d = 0; d < batch.size(); ++d) {
      if (batch[d] == 1) continue;
      const BatchDim cur{batch[d], A.batch_strides[d], B.batch_strides[d], out_strides[d]};
      if (!dims.empty()) {
        BatchDim& prev = dims.back();
        if (prev.sa == cur.sa * cur.size && prev.sb == cur.sb * cur.size && prev.sc == cur.sc * cur.size) {
          prev = {prev.size * cur.size, cur.sa, cur.sb, cur.sc};
          continue;
        }
      }
      dims.push_back(cur);
    }
    BatchDim inner{1, 0, 0, 0};
    if (!dims.empty()) {
      inner = dims.back();
      dims.pop_back();
    }
    // [B,m,k] @ [k,n] (b broadcast, a's rows stacked across the batch): one GEMM, M = B*m.
    int64_t rows = m;
    if (dims.empty() && inner.size > 1 && inner.sb == 0 && !eff_ta && inner.sa == m * A.ld && inner.sc == m * n) {
      rows = m * inner.size;
      inner = {1, 0, 0, 0};
    }

    // out^T[n, rows] = op(S_b)^T op(S_a)^T in cuBLASLt's column-major terms.
    GemmShape g;
    g.device = out.device().index;
    g.dtype = int(types.data);
    g.compute = int(types.compute);
    g.op_a = eff_tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    g.op_b = eff_ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    g.a_rows = uint64_t(eff_tb ? kk : n);  // S_b is [k, n] (or [n, k] when transposed), read column-major
    g.a_cols = uint64_t(eff_tb ? n : kk);
    g.lda = B.ld;
    g.b_rows = uint64_t(eff_ta ? rows : kk);  // S_a is [rows, k] (or [k, m])
    g.b_cols = uint64_t(eff_ta ? kk : rows);
    g.ldb = A.ld;
    g.d_rows = uint64_t(n);
    g.d_cols = uint64_t(rows);
    g.ldd = n;
    g.stride_a = inner.sb;
    g.stride_b = inner.sa;
    g.stride_d = inner.sc;

    const char* pa = static_cast<const char*>(A.t.raw_data());
    const char* pb = static_cast<const char*>(B.t.raw_data());
    char* pc = static_cast<char*>(out.raw_data());
    int64_t outer = 1;
    for (const BatchDim& d : dims) outer *= d.size;
    for (int64_t o = 0; o < outer; ++o) {
      int64_t oa = 0, ob = 0, oc = 0, rest = o;
      for (size_t d = dims.size(); d-- > 0;) {
        const int64_t i = rest % dims[d].size;
        rest /= dims[d].size;
        oa += i * dims[d].sa;
        ob += i * dims[d].sb;
        oc += i * dims[d].sc;
      }
      // Batch counts are int32 in cuBLASLt: larger batches go in chunks.
      constexpr int64_t kMaxBatch = int64_t(1) << 30;
      for (int64_t b0 = 0; b0 < inner.size; b0 += kMaxBatch) {
        const int64_t count = std::min(kMaxBatch, inner.size - b0);
        g.batch = int32_t(count);
        const void* a_ptr = pb + (ob + b0 * inner.sb) * esize;  // cuBLASLt's A is our b
        const void* b_ptr = pa + (oa + b0 * inner.sa) * esize;
        void* d_ptr = pc + (oc + b0 * inner.sc) * esize;
        g.align_a = alignment_of(a_ptr, count > 1 ? inner.sb * esize : 0);
        g.align_b = alignment_of(b_ptr, count > 1 ? inner.sa * esize : 0);
        g.align_d = alignment_of(d_ptr, count > 1 ? inner.sc * esize : 0);
        run_gemm(g, types.scale, a_ptr, b_ptr, d_ptr, k.stream);
      }
    }
  }
  if (!out_arg.is_contiguous()) cuda_backend::copy_into(out, out_arg);
}

}  // namespace

void register_cuda_matmul() { register_kernel(OpId::MatMul, DeviceType::CUDA, matmul_kernel); }

}  // namespace strata::cuda_kernels
