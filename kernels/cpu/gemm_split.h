// How one matrix product C[m x n] = op(A) op(B) is shared among the intra-op threads.
//
// Each part is a single-threaded GEMM (kernels/cpu/gemm.h) on a block of rows of C (a block
// of rows of op(A), all of op(B)) or a block of columns (all of op(A), a block of columns
// of op(B)). Every part packs the operand it shares again: a row split repacks op(B)
// (k x n) per part, a column split op(A) (m x k). Rows are the default: parts of whole
// 12-row blocks keep OpenBLAS's micro-kernel tiles (Haswell/Zen sgemm tiles the rows of
// row-major C by 12), so at most shapes the product is bit for bit the unsplit one -- but
// not at all: OpenBLAS chooses its path (small-matrix kernels, k blocking) by the size of
// each part, so a part can round differently from the whole (100x37x300 and 130x258x129
// do on Zen). Results may therefore differ in the last bits between thread counts, never
// between runs: the plan depends on the shape and the thread budget only.
//
// Columns (16-column blocks; OpenBLAS's edge tiles may round a few elements differently
// from the unsplit product) are chosen when the row split's extra packing of op(B) exceeds
// the column split's extra packing of op(A) by more than the elements of C:
// k (n - m) > m n. Measured at 2 threads on Zen 3 (strata-bench ops shapes and a sweep of
// 64/128 x 512 x k): a column split costs about one packed element per element of C more
// than a row split (fitted, not explained; its parts write C in strided row pieces), so
// it wins only when it saves more packing than that -- 64x512x784 (0.87x as rows), 64x9216x128 (0.75x), but
// not 128x512x10..128 or 64x512x10..64, where rows ran 1.1-2.7x faster than columns.
//
// A product is split only when each part is at least ~7 us of single-threaded work by
// gemm_cost_ns(): a hand-off to a polling worker costs ~1 us, and products of 10-50 us
// with little arithmetic per element (the MLP's 512->10 layer: 128x10x512, 512x10x128,
// 128x512x10) ran 1.3-1.5x faster split by rows than whole. That holds while the worker
// is awake (it polls ~50 us after each job). A worker asleep costs more: after a 200 us
// pause, 128x10x512 and 128^3 ran 0.7-0.8x split, 256x256x128 1.2-1.4x faster. Running
// short parts on the caller alone when every worker sleeps fixed the first case but left
// the worker asleep for a stream of short products (128^3 back to back: 0.65x), and waking
// it on the side cost the caller as much as the split lost, so the plan ignores the
// worker's state (and stays a function of the shape alone: run-to-run determinism).
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

// Single-threaded time of an m x n x k float GEMM on one core: the arithmetic at ~100
// GFLOP/s plus ~0.3 ns per element of A and B packed and of C zeroed and written. Fitted
// to OpenBLAS sgemm on Zen 3 (one thread): within ~25% from 64x10x128 (~5 us, where the
// elements dominate) to 512x512x128.
double gemm_cost_ns(int64_t m, int64_t n, int64_t k);

// The least single-threaded work per part that repays handing a part to another thread.
// Measured at 2 threads through the matmul op with the worker polling (medians of 21-41
// alternating rounds): products estimated at ~9 us (64x64x64, 128x10x128) ran 0.9x
// split, ~18 us ones (512x10x64 A^T, 64x512x10 B^T) 1.0-1.3x, 128x10x512 (~35 us) 1.13x,
// 64x10x128 and 128x10x64 A^T (~5 us) 0.75-0.95x.
constexpr double kGemmMinPartNs = 7000.0;

// The split of an m x n x k product over at most `threads` threads.
GemmSplit plan_gemm_split(int64_t m, int64_t n, int64_t k, int threads);

// Runs part(r0, r1, c0, c1) -- the block C[r0:r1, c0:c1] -- for every part of `split` of
// an m x n product, on the pool (the caller runs parts too; any number of parts, each
// whole blocks). GemmSplitAxis::None runs part(0, m, 0, n) on the caller.
void run_gemm_split(const GemmSplit& split, int64_t m, int64_t n,
                    const std::function<void(int64_t, int64_t, int64_t, int64_t)>& part);

}  // namespace strata::cpu_kernels
