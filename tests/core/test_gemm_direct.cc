// The direct GEMM kernel (kernels/cpu/gemm_direct.h): its products against a float64
// reference over edge shapes (every transpose, strided operands, beta 0 / 1 / other),
// one result whatever block split a caller makes of C, and the shape rule that routes the
// matmul op to it.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <strata/kernels/cpu/gemm.h>
#include <strata/kernels/cpu/gemm_direct.h>
#include <strata/kernels/cpu/gemm_split.h>

#include "tests/core/core_test_helpers.h"

using namespace strata;
namespace ck = strata::cpu_kernels;

namespace {

// Operands in [-1, 1] from a small LCG (values with many mantissa bits, so that a wrong
// summation order or a lost term shows).
std::vector<float> direct_gemm_floats(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (auto& f : v) {
    x = x * 1664525u + 1013904223u;
    f = float(int32_t(x >> 8) % 100003) / 100003.0f;
  }
  return v;
}

// One product with operands stored as op() says, every leading dimension padded by `pad`.
struct DirectGemmCase {
  bool ta, tb;
  int64_t m, n, k, pad;
  int64_t lda() const { return (ta ? m : k) + pad; }
  int64_t ldb() const { return (tb ? k : n) + pad; }
  int64_t ldc() const { return n + pad; }
  float a_at(const std::vector<float>& a, int64_t i, int64_t p) const { return ta ? a[size_t(p * lda() + i)] : a[size_t(i * lda() + p)]; }
  float b_at(const std::vector<float>& b, int64_t p, int64_t j) const { return tb ? b[size_t(j * ldb() + p)] : b[size_t(p * ldb() + j)]; }
};

constexpr float kDirectGemmSentinel = -7.25f;

}  // namespace

TEST_CASE("direct GEMM: products match a float64 reference", "[linalg]") {
  const ck::DirectGemmFn direct = ck::direct_gemm_kernel();
  if (direct == nullptr) {
    WARN("skipped: this CPU lacks AVX2 or FMA, so the direct GEMM kernel is not used here");
    return;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int checked = 0;
  for (int64_t m : {1, 3, 8, 13, 24, 40}) {
    for (int64_t n : {1, 5, 8, 10, 16, 17, 31, 48}) {
      for (int64_t k : {1, 2, 9, 33}) {
        for (bool ta : {false, true}) {
          for (bool tb : {false, true}) {
            for (int64_t pad : {0, 3}) {
              for (float beta : {0.0f, 1.0f, -0.5f}) {
                const DirectGemmCase g{ta, tb, m, n, k, pad};
                CAPTURE(m, n, k, ta, tb, pad, beta);
                const auto a = direct_gemm_floats(size_t((ta ? k : m) * g.lda()), 1);
                const auto b = direct_gemm_floats(size_t((tb ? n : k) * g.ldb()), 2);
                const auto c0 = direct_gemm_floats(size_t(m * g.ldc()), 3);
                std::vector<float> c(c0.size());
                for (int64_t i = 0; i < m; ++i) {
                  for (int64_t j = 0; j < g.ldc(); ++j) {
                    // beta = 0 must not read C: NaN there would leak into the result.
                    const bool inside = j < n;
                    c[size_t(i * g.ldc() + j)] =
                        !inside ? kDirectGemmSentinel : (beta == 0.0f ? nan : c0[size_t(i * g.ldc() + j)]);
                  }
                }
                direct(ta, tb, m, n, k, a.data(), g.lda(), b.data(), g.ldb(), beta, c.data(), g.ldc());
                for (int64_t i = 0; i < m; ++i) {
                  for (int64_t j = 0; j < g.ldc(); ++j) {
                    const float got = c[size_t(i * g.ldc() + j)];
                    if (j >= n) {
                      REQUIRE(got == kDirectGemmSentinel);  // padding untouched
                      continue;
                    }
                    double ref = 0, magnitude = 0;
                    for (int64_t p = 0; p < k; ++p) {
                      const double t = double(g.a_at(a, i, p)) * double(g.b_at(b, p, j));
                      ref += t;
                      magnitude += std::fabs(t);
                    }
                    const double old = c0[size_t(i * g.ldc() + j)];
                    if (beta != 0.0f) {
                      ref += double(beta) * old;
                      magnitude += std::fabs(double(beta) * old);
                    }
                    // One rounding per fused multiply-add: at most k + 1 of them.
                    const double tolerance = double(k + 2) * 0x1p-24 * magnitude + 1e-30;
                    if (!(std::fabs(double(got) - ref) <= tolerance)) {
                      FAIL_CHECK("C[" << i << "][" << j << "] = " << got << ", float64 reference " << ref);
                    }
                  }
                }
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  CHECK(checked == 6 * 8 * 4 * 4 * 2 * 3);
}

TEST_CASE("direct GEMM: C split into blocks gives the whole product bit for bit", "[linalg]") {
  const ck::DirectGemmFn direct = ck::direct_gemm_kernel();
  if (direct == nullptr) {
    WARN("skipped: this CPU lacks AVX2 or FMA, so the direct GEMM kernel is not used here");
    return;
  }
  // 32 x 10 with A^T takes the swapped path (C^T from A's rows); its blocks of 12 rows
  // (not whole vectors of 8) take the plain one: both must round every element alike.
  struct Shape3 {
    int64_t m, n, k;
  };
  for (const Shape3 s : {Shape3{32, 10, 64}, Shape3{64, 128, 10}, Shape3{50, 37, 20}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        CAPTURE(s.m, s.n, s.k, ta, tb);
        const DirectGemmCase g{ta, tb, s.m, s.n, s.k, 0};
        const auto a = direct_gemm_floats(size_t(s.m * s.k), 4);
        const auto b = direct_gemm_floats(size_t(s.k * s.n), 5);
        std::vector<float> whole(size_t(s.m * s.n)), blocks(whole.size());
        direct(ta, tb, s.m, s.n, s.k, a.data(), g.lda(), b.data(), g.ldb(), 0.0f, whole.data(), s.n);
        for (int64_t row_block : {int64_t(12), int64_t(7)}) {
          for (int64_t col_block : {int64_t(16), int64_t(5)}) {
            std::fill(blocks.begin(), blocks.end(), std::numeric_limits<float>::quiet_NaN());
            for (int64_t r0 = 0; r0 < s.m; r0 += row_block) {
              for (int64_t c0 = 0; c0 < s.n; c0 += col_block) {
                const int64_t rows = std::min(row_block, s.m - r0), cols = std::min(col_block, s.n - c0);
                const float* pa = a.data() + r0 * (ta ? 1 : g.lda());
                const float* pb = b.data() + c0 * (tb ? g.ldb() : 1);
                direct(ta, tb, rows, cols, s.k, pa, g.lda(), pb, g.ldb(), 0.0f, blocks.data() + r0 * s.n + c0, s.n);
              }
            }
            CAPTURE(row_block, col_block);
            REQUIRE(std::memcmp(blocks.data(), whole.data(), whole.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("direct GEMM: the shapes it takes", "[linalg]") {
  // The CNN's dense2 products, the MLP's 512->10 layer, conv1's im2col product: narrow
  // outputs and short sums.
  CHECK(ck::direct_gemm_suits(64, 10, 128));
  CHECK(ck::direct_gemm_suits(128, 10, 64));
  CHECK(ck::direct_gemm_suits(64, 128, 10));
  CHECK(ck::direct_gemm_suits(128, 10, 512));
  CHECK(ck::direct_gemm_suits(512, 10, 128));
  CHECK(ck::direct_gemm_suits(43264, 32, 9));
  CHECK(ck::direct_gemm_suits(64, 64, 64));  // a small product
  // OpenBLAS's cache blocking wins: medium and large products, long panels.
  CHECK_FALSE(ck::direct_gemm_suits(128, 128, 128));
  CHECK_FALSE(ck::direct_gemm_suits(256, 256, 256));
  CHECK_FALSE(ck::direct_gemm_suits(64, 128, 9216));  // the CNN's dense1
  CHECK_FALSE(ck::direct_gemm_suits(9216, 128, 64));
  CHECK_FALSE(ck::direct_gemm_suits(36864, 64, 288));  // conv2
  CHECK_FALSE(ck::direct_gemm_suits(64, 16, 4096));  // narrow, but its panel would leave L2
  CHECK_FALSE(ck::direct_gemm_suits(0, 10, 10));
  CHECK_FALSE(ck::direct_gemm_suits(10, 10, 0));
  // The matmul op routes by the rule and by the CPU.
  const bool direct_here = ck::direct_gemm_kernel() != nullptr;
  CHECK((ck::choose_gemm_kernel(64, 10, 128) == ck::GemmKernel::Direct) == direct_here);
  CHECK(ck::choose_gemm_kernel(256, 256, 256) == ck::GemmKernel::Blas);
}

TEST_CASE("direct GEMM: the matmul op gives the same bits at any thread count", "[linalg][threads]") {
  // These products run the direct kernel and are split by rows at 2 threads (the MLP's
  // 512->10 layer at batch 128): one in-order sum per element, whatever the split.
  if (ck::direct_gemm_kernel() == nullptr) {
    WARN("skipped: this CPU lacks AVX2 or FMA, so the direct GEMM kernel is not used here");
    return;
  }
  struct Product {
    int64_t m, n, k;
    bool ta, tb;
  };
  for (const Product p : {Product{128, 10, 512, false, false}, Product{512, 10, 128, true, false},
                          Product{128, 512, 10, false, true}}) {
    REQUIRE(ck::plan_gemm_split(p.m, p.n, p.k, 2).axis != ck::GemmSplitAxis::None);
    CAPTURE(p.m, p.n, p.k, p.ta, p.tb);
    REQUIRE(ck::choose_gemm_kernel(p.m, p.n, p.k) == ck::GemmKernel::Direct);
    const Tensor a = random::normal(p.ta ? Shape{p.k, p.m} : Shape{p.m, p.k}, 7);
    const Tensor b = random::normal(p.tb ? Shape{p.n, p.k} : Shape{p.k, p.n}, 8);
    std::vector<float> one, two;
    {
      testing::ThreadCountGuard g(1);
      one = matmul(a, b, p.ta, p.tb).to_vector<float>();
    }
    {
      testing::ThreadCountGuard g(2);
      two = matmul(a, b, p.ta, p.tb).to_vector<float>();
    }
    REQUIRE(one.size() == size_t(p.m * p.n));
    CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  }
}
