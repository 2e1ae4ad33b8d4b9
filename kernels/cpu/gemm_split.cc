// The split of one matrix product across the intra-op pool (kernels/cpu/gemm_split.h).
#include <strata/kernels/cpu/gemm_split.h>

#include <algorithm>

#include <strata/core/thread_pool.h>

namespace strata::cpu_kernels {

double gemm_cost_ns(int64_t m, int64_t n, int64_t k) {
  const double dm = double(m), dn = double(n), dk = double(k);
  return 2.0 * dm * dn * dk * 0.01 + (dm * dn + dm * dk + dk * dn) * 0.3;
}

GemmSplit plan_gemm_split(int64_t m, int64_t n, int64_t k, int threads) {
  if (threads <= 1 || m <= 0 || n <= 0 || k <= 0) return {};
  // Columns when they save more packing (op(B) per row part against op(A) per column
  // part) than they cost in writing C (gemm_split.h).
  const double dm = double(m), dn = double(n), dk = double(k);
  const bool rows = !(dk * (dn - dm) > dm * dn);
  const int64_t extent = rows ? m : n, block = rows ? kGemmSplitRowBlock : kGemmSplitColBlock;
  const int64_t blocks = (extent + block - 1) / block;
  const int64_t by_work = int64_t(gemm_cost_ns(m, n, k) / kGemmMinPartNs);
  const int parts = int(std::min<int64_t>({int64_t(threads), blocks, by_work}));
  if (parts <= 1) return {};
  return {rows ? GemmSplitAxis::Rows : GemmSplitAxis::Cols, parts};
}

void run_gemm_split(const GemmSplit& split, int64_t m, int64_t n,
                    const std::function<void(int64_t, int64_t, int64_t, int64_t)>& part) {
  if (split.axis == GemmSplitAxis::None || split.parts <= 1 || m <= 0 || n <= 0) {
    part(0, m, 0, n);
    return;
  }
  const bool rows = split.axis == GemmSplitAxis::Rows;
  const int64_t extent = rows ? m : n, block = rows ? kGemmSplitRowBlock : kGemmSplitColBlock;
  const int64_t blocks = (extent + block - 1) / block;
  parallel_for_parts(blocks, split.parts, [&](int64_t b0, int64_t b1) {
    const int64_t lo = b0 * block, hi = std::min(extent, b1 * block);
    if (rows) {
      part(lo, hi, 0, n);
    } else {
      part(0, m, lo, hi);
    }
  });
}

}  // namespace strata::cpu_kernels
