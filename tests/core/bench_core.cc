// Hidden benchmarks (run with: strata_core_tests "[.bench]"): float32 matmul 1024^3 through
// strata::matmul against cblas_sgemm called directly, and elementwise add of 16M floats into
// a fresh output against a plain loop, at one and two threads. Medians of interleaved reps,
// each next to its baseline measured in the same process.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "strata_build_config.h"
#include "tests/core/core_test_helpers.h"

#if STRATA_HAS_OPENBLAS
// OpenBLAS (linked through strata_core); declared here because its headers are private to it.
extern "C" {
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc);
void openblas_set_num_threads(int n);
}
#endif

using namespace strata;

namespace {

constexpr int kRowMajor = 101, kNoTrans = 111;

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs every candidate `reps` times, interleaved, after one warm-up each; returns medians.
std::vector<double> interleaved(int reps, const std::vector<std::function<void()>>& fns) {
  std::vector<std::vector<double>> t(fns.size());
  for (const auto& f : fns) f();
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < fns.size(); ++i) t[i].push_back(seconds_of(fns[i]));
  }
  std::vector<double> out;
  for (auto& v : t) out.push_back(median(v));
  return out;
}

}  // namespace

#if STRATA_HAS_OPENBLAS  // builds without OpenBLAS have no cblas_sgemm to compare with
TEST_CASE("bench: matmul 1024^3 float32 vs cblas_sgemm", "[.bench]") {
  const int n = 1024;
  const double flop = 2.0 * n * n * n;
  Tensor a = testing::rand_tensor({n, n}, 1), b = testing::rand_tensor({n, n}, 2);
  std::vector<float> c(size_t(n) * n);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  auto sgemm_rows = [&](int r0, int r1) {
    cblas_sgemm(kRowMajor, kNoTrans, kNoTrans, r1 - r0, n, n, 1.0f, pa + size_t(r0) * n, n, pb, n, 0.0f,
                c.data() + size_t(r0) * n, n);
  };
  Tensor keep;
  for (int threads : {1, 2}) {
    testing::ThreadCountGuard g(threads);
    std::vector<std::function<void()>> fns = {
        [&] { keep = matmul(a, b); },
        [&] {
          openblas_set_num_threads(1);
          if (threads == 1) {
            sgemm_rows(0, n);
          } else {  // the same split strata makes: two single-threaded sgemms over row halves
            std::thread t([&] { sgemm_rows(n / 2, n); });
            sgemm_rows(0, n / 2);
            t.join();
          }
        },
        [&] {
          openblas_set_num_threads(threads);  // OpenBLAS's own threading
          sgemm_rows(0, n);
          openblas_set_num_threads(1);
        }};
    const auto med = interleaved(9, fns);
    std::printf("matmul 1024^3 f32, %d thread(s): strata %.1f GFLOP/s | cblas_sgemm (strata's split) %.1f | "
                "cblas_sgemm (openblas %d threads) %.1f | ratio strata/openblas %.3f\n",
                threads, flop / med[0] * 1e-9, flop / med[1] * 1e-9, threads, flop / med[2] * 1e-9,
                med[2] / med[0]);
  }
  openblas_set_num_threads(1);
  CHECK(testing::allclose(keep, Tensor::from_vector(c, {n, n}), 1e-4, 1e-4));
}
#endif

TEST_CASE("bench: add of 16M float32 into a fresh output vs a plain loop", "[.bench]") {
  const int64_t n = int64_t(1) << 24;
  const double bytes = 12.0 * double(n);
  Tensor a = testing::rand_tensor({n}, 3), b = testing::rand_tensor({n}, 4);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  std::vector<float> warm(size_t(n), 0.0f);  // an output whose pages are already mapped
  auto loop = [&](float* c, int threads) {
    auto part = [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) c[i] = pa[i] + pb[i];
    };
    if (threads == 1) {
      part(0, n);
    } else {
      std::thread t(part, n / 2, n);
      part(0, n / 2);
      t.join();
    }
  };
  Tensor keep;
  volatile float sink = 0;
  for (int threads : {1, 2}) {
    testing::ThreadCountGuard g(threads);
    const auto med = interleaved(15, {
        [&] { keep = add(a, b); },
        [&] { loop(warm.data(), threads); },
        [&] {  // the loop into a fresh 64 MB malloc, as strata's output is
          float* c = static_cast<float*>(std::malloc(size_t(n) * 4));
          loop(c, threads);
          sink = c[n - 1];  // keep the stores observable
          std::free(c);
        }});
    std::printf("add 16M f32, %d thread(s): strata %.1f GB/s | loop into a reused buffer %.1f GB/s | "
                "loop into a fresh malloc %.1f GB/s | ratio strata/loop %.3f\n",
                threads, bytes / med[0] * 1e-9, bytes / med[1] * 1e-9, bytes / med[2] * 1e-9, med[1] / med[0]);
  }
  CHECK(testing::identical(keep, Tensor::from_vector(warm, {n})));
}
