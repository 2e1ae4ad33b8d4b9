// The split of one matrix product across the intra-op threads (kernels/cpu/gemm_split.h):
// the plan for each shape and thread budget, and that every plan -- rows or columns, any
// number of parts, transposed and strided operands -- gives the unsplit product: bit for
// bit for row splits (whole 12-row blocks keep OpenBLAS's tiles), to rounding for column
// splits (edge tiles may round differently; the k-order of each sum is unchanged).
#include <array>
#include <atomic>
#include <cmath>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <strata/kernels/cpu/gemm.h>
#include <strata/kernels/cpu/gemm_split.h>

#include "tests/core/core_test_helpers.h"

using namespace strata;
namespace ck = strata::cpu_kernels;

namespace {

std::vector<float> split_test_floats(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& f : v) {
    x = x * 1664525u + 1013904223u;
    f = float(int32_t(x >> 8) % 2000) / 997.0f;
  }
  return v;
}

// C = op(A) op(B) under `split`, operands with leading dimensions padded by `pad` so that
// they are strided views of larger buffers.
std::vector<float> split_product(const ck::GemmSplit& split, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                           int64_t pad) {
  const int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  const auto a = split_test_floats(size_t((ta ? k : m) * lda), 1);
  const auto b = split_test_floats(size_t((tb ? n : k) * ldb), 2);
  std::vector<float> c(size_t(m * ldc), -7.0f);  // padding must stay untouched
  // One kernel for every part, chosen from the whole product's shape, as the matmul op does
  // (kernels/cpu/gemm.h): a part's own shape may suit the direct kernel where the whole
  // does not, and the two sum in different orders.
  const ck::GemmKernel kernel = ck::choose_gemm_kernel(m, n, k);
  ck::run_gemm_split(split, m, n, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const float* pa = a.data() + r0 * (ta ? 1 : lda);
    const float* pb = b.data() + c0 * (tb ? ldb : 1);
    ck::gemm(kernel, ta, tb, r1 - r0, c1 - c0, k, pa, lda, pb, ldb, 0.0f, c.data() + r0 * ldc + c0, ldc);
  });
  return c;
}

}  // namespace

TEST_CASE("gemm split: the plan follows the shape and the thread budget", "[linalg][threads]") {
  // One thread, or no work: never split.
  CHECK(ck::plan_gemm_split(1024, 1024, 1024, 1).axis == ck::GemmSplitAxis::None);
  CHECK(ck::plan_gemm_split(0, 1024, 1024, 2).axis == ck::GemmSplitAxis::None);
  CHECK(ck::plan_gemm_split(1024, 1024, 0, 2).axis == ck::GemmSplitAxis::None);
  // Under ~5 us of work per part (gemm_cost_ns): the caller runs it alone.
  CHECK(ck::plan_gemm_split(32, 32, 32, 2).axis == ck::GemmSplitAxis::None);
  CHECK(ck::plan_gemm_split(64, 10, 128, 2).axis == ck::GemmSplitAxis::None);  // the CNN's dense2
  CHECK(ck::plan_gemm_split(128, 10, 64, 2).axis == ck::GemmSplitAxis::None);
  CHECK(ck::gemm_cost_ns(64, 10, 128) < 2 * ck::kGemmMinPartNs);
  // Products with little arithmetic per element still repay a split: their time goes to
  // packing and writing, which the parts share (the MLP's 512->10 layer at batch 128).
  CHECK(ck::plan_gemm_split(128, 10, 512, 2).axis == ck::GemmSplitAxis::Rows);
  CHECK(ck::plan_gemm_split(512, 10, 128, 2).axis == ck::GemmSplitAxis::Rows);
  // Rows, unless columns save more packing of op(B) than they cost in writing C:
  // k (n - m) > m n.
  const ck::GemmSplit dx = ck::plan_gemm_split(128, 512, 10, 2);  // the MLP's last dx
  CHECK(dx.axis == ck::GemmSplitAxis::Rows);
  CHECK(dx.parts == 2);
  const ck::GemmSplit tall = ck::plan_gemm_split(784, 512, 128, 2);  // the MLP's dW
  CHECK(tall.axis == ck::GemmSplitAxis::Rows);
  CHECK(tall.parts == 2);
  const ck::GemmSplit wide = ck::plan_gemm_split(128, 512, 784, 2);  // the MLP's forward product
  CHECK(wide.axis == ck::GemmSplitAxis::Cols);
  CHECK(wide.parts == 2);
  CHECK(ck::plan_gemm_split(128, 512, 128, 2).axis == ck::GemmSplitAxis::Rows);  // 128 * 384 < 128 * 512
  CHECK(ck::plan_gemm_split(64, 512, 128, 2).axis == ck::GemmSplitAxis::Cols);   // 128 * 448 > 64 * 512
  CHECK(ck::plan_gemm_split(64, 9216, 128, 2).axis == ck::GemmSplitAxis::Cols);  // the CNN's dense1 dx
  CHECK(ck::plan_gemm_split(128, 128, 128, 2).parts == 2);
  CHECK(ck::plan_gemm_split(4096, 4096, 4096, 16).parts == 16);
  CHECK(ck::plan_gemm_split(128, 128, 128, 2).axis == ck::GemmSplitAxis::Rows);
  CHECK(ck::plan_gemm_split(4096, 4096, 4096, 2).axis == ck::GemmSplitAxis::Rows);
  // Never more parts than whole blocks: 20 rows are two 12-row blocks, 12 rows one.
  const ck::GemmSplit narrow = ck::plan_gemm_split(20, 10, 100000, 8);
  CHECK(narrow.axis == ck::GemmSplitAxis::Rows);
  CHECK(narrow.parts == 2);
  CHECK(ck::plan_gemm_split(12, 10, 100000, 8).axis == ck::GemmSplitAxis::None);
  CHECK(ck::plan_gemm_split(4, 20, 100000, 8).parts == 2);  // two 16-column blocks
}

// Column splits: within float32 rounding of the unsplit product (relative to the row's
// magnitude; every operand here is in [0, 2]).
bool split_close(const std::vector<float>& x, const std::vector<float>& y, int64_t k) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(x[i] - y[i]) > 4e-7f * float(k) * 4.0f + 1e-6f) return false;
  }
  return true;
}

TEST_CASE("gemm split: every plan gives the unsplit product", "[linalg][threads]") {
  testing::ThreadCountGuard g(2);
  struct Shape3 {
    int64_t m, n, k;
  };
  const Shape3 shapes[] = {{1, 1, 1},     {5, 3, 7},      {17, 33, 9},    {64, 64, 64}, {100, 37, 300},
                           {37, 100, 300}, {128, 10, 512}, {130, 258, 129}, {257, 31, 1000}};
  for (const auto& s : shapes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (int64_t pad : {0, 3}) {
          CAPTURE(s.m, s.n, s.k, ta, tb, pad);
          const auto whole = split_product({}, ta, tb, s.m, s.n, s.k, pad);
          for (auto axis : {ck::GemmSplitAxis::Rows, ck::GemmSplitAxis::Cols}) {
            for (int parts : {2, 3, 5}) {
              CAPTURE(int(axis), parts);
              const auto split = split_product({axis, parts}, ta, tb, s.m, s.n, s.k, pad);
              // Rows usually give the unsplit bits, but not at every shape: OpenBLAS picks
              // its path (the small-matrix kernels, the k blocking) by the part's size, so
              // a part may round differently from the whole (seen at 100x37x300 and
              // 130x258x129 on Zen). Both axes are held to float32 rounding.
              REQUIRE(split_close(split, whole, s.k));
            }
          }
          // The plan the matmul kernel would choose for two threads, too.
          const ck::GemmSplit plan = ck::plan_gemm_split(s.m, s.n, s.k, 2);
          const auto planned = split_product(plan, ta, tb, s.m, s.n, s.k, pad);
          REQUIRE(split_close(planned, whole, s.k));
        }
      }
    }
  }
}

TEST_CASE("gemm split: parts cover the product once, in whole blocks", "[linalg][threads]") {
  testing::ThreadCountGuard g(2);
  for (auto axis : {ck::GemmSplitAxis::Rows, ck::GemmSplitAxis::Cols}) {
    const int64_t m = 333, n = 271;
    std::vector<std::atomic<int>> hits(size_t(m * n));
    std::mutex mutex;
    std::vector<std::array<int64_t, 4>> parts;  // Catch2 assertions stay on this thread
    ck::run_gemm_split({axis, 4}, m, n, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        parts.push_back({r0, r1, c0, c1});
      }
      for (int64_t i = r0; i < r1; ++i) {
        for (int64_t j = c0; j < c1; ++j) hits[size_t(i * n + j)]++;
      }
    });
    // Two threads: at most two parts run (available_threads() caps the request for 4).
    CHECK(parts.size() == 2);
    for (const auto& p : parts) {
      // Whole blocks along the split axis; only the last part may end on a partial one.
      const int64_t lo = axis == ck::GemmSplitAxis::Rows ? p[0] : p[2];
      const int64_t hi = axis == ck::GemmSplitAxis::Rows ? p[1] : p[3];
      const int64_t extent = axis == ck::GemmSplitAxis::Rows ? m : n;
      const int64_t block = axis == ck::GemmSplitAxis::Rows ? ck::kGemmSplitRowBlock : ck::kGemmSplitColBlock;
      CHECK(lo % block == 0);
      CHECK((hi % block == 0 || hi == extent));
    }
    for (auto& h : hits) REQUIRE(h == 1);
  }
}

TEST_CASE("gemm split: matmul at 1 and 2 threads agrees on training shapes", "[linalg][threads]") {
  // The MLP 784-512-512-10 (batch 64) products with autograd's transposes, and a product
  // small enough to stay on one thread.
  struct Case {
    int64_t m, n, k;
    bool ta, tb;
  };
  const Case cases[] = {{64, 512, 784, false, false}, {784, 512, 64, true, false}, {64, 512, 512, false, true},
                        {64, 10, 512, false, false},   {512, 10, 64, true, false},  {64, 512, 10, false, true},
                        {8, 8, 8, false, false}};
  for (const auto& c : cases) {
    CAPTURE(c.m, c.n, c.k, c.ta, c.tb);
    Tensor a = testing::rand_tensor(c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, 11);
    Tensor b = testing::rand_tensor(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, 12);
    Tensor one, two;
    {
      testing::ThreadCountGuard g(1);
      one = matmul(a, b, c.ta, c.tb);
    }
    {
      testing::ThreadCountGuard g(2);
      two = matmul(a, b, c.ta, c.tb);
      // A strided (non-contiguous) view of b takes the same path.
      Tensor wide = testing::rand_tensor(c.tb ? Shape{c.n, c.k + 5} : Shape{c.k, c.n + 5}, 12);
      Tensor view = c.tb ? wide.slice(1, 0, c.k) : wide.slice(1, 0, c.n);
      Tensor copy = view.contiguous();
      CHECK(strata::testing::identical(matmul(a, view, c.ta, c.tb), matmul(a, copy, c.ta, c.tb)));
    }
    // Bit for bit unless the plan splits columns.
    if (ck::plan_gemm_split(c.m, c.n, c.k, 2).axis == ck::GemmSplitAxis::Cols) {
      CHECK(testing::allclose(one, two, 1e-5, 1e-5));
    } else {
      CHECK(strata::testing::identical(one, two));
    }
  }
}
