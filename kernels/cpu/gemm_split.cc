// The split of one matrix product across the intra-op pool (kernels/cpu/gemm_split.h).
#include <strata/kernels/cpu/gemm_split.h>

#include <algorithm>

#include <strata/core/thread_pool.h>

namespace strata::cpu_kernels {

GemmSplit plan_gemm_split(int64_t m, int64_t n, int64_t k, int threads) {
  if (threads <= 1 || m <= 0 || n <= 0 || k <= 0) return {};
  // Rows unless op(B) (k x n, repacked by every row part) is much larger than op(A)
  // (m x k, repacked by every column part).
  const bool rows = n < 2 * m;
  const int64_t extent = rows ? m : n, block = rows ? kGemmSplitRowBlock : kGemmSplitColBlock;
  const int64_t blocks = (extent + block - 1) / block;
  const double flops = 2.0 * double(m) * double(n) * double(k);
  const int64_t by_work = int64_t(flops / kGemmMinFlopsPerPart);
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
