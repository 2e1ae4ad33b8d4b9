// How one matrix product C[m x n] = op(A) op(B) is shared among the intra-op threads.
//
// Each part is a single-threaded GEMM (kernels/cpu/gemm.h) on a block of rows of C (a block
// of rows of op(A), all of op(B)) or a block of columns (all of op(A), a block of columns
// of op(B)). Every part packs the operand it shares again. Rows are the default: parts of
// whole 12-row blocks keep OpenBLAS's micro-kernel tiles (Haswell/Zen sgemm tiles the
// rows of row-major C by 12), so at most shapes the product is bit for bit the unsplit
// one -- but not at all: OpenBLAS chooses its path (small-matrix kernels, k blocking) by
// the size of each part, so a part can round differently from the whole (100x37x300 and
// 130x258x129 do on Zen). Results may therefore differ in the last bits between thread
// counts. A product at least twice as wide as it is tall (the MLP's
// forward and input-gradient GEMMs) is split by 16-column blocks instead, so that the
// small op(A) is the repacked operand, not the large op(B); OpenBLAS's edge tiles then may
// round a few elements differently (last bits) from the unsplit product. A product too
// small to repay handing a part to another thread (under ~20 us of work per part) is
// not split at all.
#pragma once

#include <cstdint>
#include <functional>

namespace strata::cpu_kernels {

enum class GemmSplitAxis { None, Rows, Cols };

struct GemmSplit {
  GemmSplitAxis axis = GemmSplitAxis::None;
  int parts = 1;
};

// Rows / columns of C per indivisible block of a split.
constexpr int64_t kGemmSplitRowBlock = 12;
constexpr int64_t kGemmSplitColBlock = 16;
// The least work per part that repays running it on another thread: ~20 us at the ~100
// GFLOP/s one core reaches (PLATFORM.md). Measured (strata-bench ops, 2 threads): products
// of ~5-10 us per part, such as the MLP's 128x512x10 input gradient, ran slower split than
// on one thread (their time goes to writing C, not to arithmetic). A worker that is asleep
// costs more (~25-50 us), but then the caller takes the part itself (core/thread_pool.h),
// so the split costs only the repeated packing.
constexpr double kGemmMinFlopsPerPart = 2e6;

// The split of an m x n x k product over at most `threads` threads.
GemmSplit plan_gemm_split(int64_t m, int64_t n, int64_t k, int threads);

// Runs part(r0, r1, c0, c1) -- the block C[r0:r1, c0:c1] -- for every part of `split` of
// an m x n product, on the pool (the caller runs parts too; any number of parts, each
// whole blocks). GemmSplitAxis::None runs part(0, m, 0, n) on the caller.
void run_gemm_split(const GemmSplit& split, int64_t m, int64_t n,
                    const std::function<void(int64_t, int64_t, int64_t, int64_t)>& part);

}  // namespace strata::cpu_kernels
