// ops suite: CPU kernels against the hardware and against reference implementations
// measured in the same run (OpenBLAS sgemm, Eigen's own GEMM, memcpy, plain loops). Builds
// without OpenBLAS (STRATA_WITH_OPENBLAS=OFF) use Eigen's GEMM where OpenBLAS's would be.
#include "strata_build_config.h"

#if STRATA_HAS_OPENBLAS
#include <cblas.h>
#endif

#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include <strata/core/ops.h>
#include <strata/core/random.h>
#include <strata/core/thread_pool.h>

#if STRATA_HAS_OPENBLAS
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace strata::bench {

namespace {

// The reference GEMM, c[m x n] = a[m x k] b[k x n] row-major, on `threads` threads of the
// library's own: OpenBLAS's sgemm, or Eigen's product in builds without OpenBLAS.
#if STRATA_HAS_OPENBLAS
const char* const kBlasName = "OpenBLAS sgemm";
#else
const char* const kBlasName = "Eigen GEMM";
#endif
Timing time_reference_sgemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c, int threads,
                            int reps) {
#if STRATA_HAS_OPENBLAS
  openblas_set_num_threads(threads);
  Timing t = time_it([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f, a, int(k), b, int(n), 0.0f,
                c, int(n));
  }, reps);
  openblas_set_num_threads(1);
  return t;
#else
  using RowMajor = Eigen::Matrix<float, -1, -1, Eigen::RowMajor>;
  Eigen::setNbThreads(threads);
  Eigen::Map<const RowMajor> ea(a, m, k), eb(b, k, n);
  Eigen::Map<RowMajor> ec(c, m, n);
  return time_it([&] { ec.noalias() = ea * eb; }, reps);
#endif
}

double cpu_ghz() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("cpu MHz", 0) == 0) return std::stod(line.substr(line.find(':') + 1)) / 1000.0;
  }
  return 0;
}

// Peak float32 FLOP/s per core: 2 (FMA) x FMA units x vector lanes x clock. x86 cores of
// this class issue two 256-bit FMAs per cycle (Zen 4 runs AVX-512 as two 256-bit halves),
// so the lanes are 8 whenever AVX2/FMA is present.
double peak_gflops_per_core() {
  const int lanes = __builtin_cpu_supports("avx2") ? 8 : 4;
  return 2.0 * 2.0 * lanes * cpu_ghz();
}

Tensor randn(const Shape& s, uint64_t seed) { return random::normal(s, seed); }

void add_matmul(std::vector<Result>& out, int64_t n, int reps) {
  Tensor a = randn({n, n}, 1), b = randn({n, n}, 2);
  const double flops = 2.0 * double(n) * double(n) * double(n);
  const int threads = num_threads();
  Timing ts = time_it([&] { matmul(a, b); }, reps);
  std::vector<float> c(static_cast<size_t>(n * n));
  Timing tb = time_reference_sgemm(n, n, n, a.data<float>(), b.data<float>(), c.data(), threads, reps);
  Eigen::setNbThreads(threads);
  Eigen::Map<const Eigen::Matrix<float, -1, -1, Eigen::RowMajor>> ea(a.data<float>(), n, n), eb(b.data<float>(), n, n);
  Eigen::Matrix<float, -1, -1, Eigen::RowMajor> ec(n, n);
  Timing te = time_it([&] { ec.noalias() = ea * eb; }, reps);
  const std::string name = "matmul f32 " + std::to_string(n) + "^3";
  out.push_back({"ops", name, flops / ts.median_s / 1e9, "GFLOP/s", ts.spread(),
                 std::string(kBlasName) + " (" + std::to_string(threads) + " thr)", flops / tb.median_s / 1e9});
  out.push_back({"ops", name + " (Eigen GEMM)", flops / te.median_s / 1e9, "GFLOP/s", te.spread(),
                 "strata matmul", flops / ts.median_s / 1e9});
  const double peak = peak_gflops_per_core() * threads;
  if (peak > 0) {
    out.push_back({"ops", name + " (fraction of peak)", flops / ts.median_s / 1e9, "GFLOP/s", ts.spread(),
                   "machine peak " + std::to_string(int(peak)) + " GFLOP/s", peak});
  }
}

void add_elementwise(std::vector<Result>& out, int64_t n, int reps) {
  Tensor a = randn({n}, 3), b = randn({n}, 4);
  std::vector<float> c(static_cast<size_t>(n));
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const double bytes3 = 12.0 * double(n), bytes2 = 8.0 * double(n);
  // Baseline: a plain loop over the same bytes, split like strata across the threads.
  const int threads = num_threads();
  auto plain = [&](auto body) {
    std::vector<std::thread> ts;
    for (int t = 1; t < threads; ++t) ts.emplace_back([&, t] { body(n * t / threads, n * (t + 1) / threads); });
    body(0, n / threads);
    for (auto& t : ts) t.join();
  };
  Timing loop_add = time_it([&] {
    plain([&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) c[size_t(i)] = pa[i] + pb[i];
    });
  }, reps);
  Timing memcpy_t = time_it([&] {
    plain([&](int64_t s, int64_t e) { std::memcpy(c.data() + s, pa + s, size_t(e - s) * 4); });
  }, reps);
  Timing t_add = time_it([&] { add(a, b); }, reps);
  Timing t_mul = time_it([&] { mul(a, b); }, reps);
  Timing t_gelu = time_it([&] { gelu(a); }, reps);
  const std::string sz = std::to_string(n >> 20) + "M";
  out.push_back({"ops", "add f32 " + sz, bytes3 / t_add.median_s / 1e9, "GB/s", t_add.spread(), "plain loop c=a+b",
                 bytes3 / loop_add.median_s / 1e9});
  out.push_back({"ops", "mul f32 " + sz, bytes3 / t_mul.median_s / 1e9, "GB/s", t_mul.spread(), "plain loop c=a+b",
                 bytes3 / loop_add.median_s / 1e9});
  out.push_back({"ops", "gelu f32 " + sz, bytes2 / t_gelu.median_s / 1e9, "GB/s", t_gelu.spread(), "memcpy",
                 bytes2 / memcpy_t.median_s / 1e9});
  double s = 0;
  Timing loop_sum = time_it([&] {
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += pa[i];
    s = acc;
  }, reps);
  Timing t_sum = time_it([&] { sum(a); }, reps);
  out.push_back({"ops", "sum f32 " + sz, 4.0 * double(n) / t_sum.median_s / 1e9, "GB/s", t_sum.spread(),
                 "plain loop (1 thr, double acc)", 4.0 * double(n) / loop_sum.median_s / 1e9});
  (void)s;
}

void add_softmax(std::vector<Result>& out, int64_t rows, int64_t cols, int reps) {
  Tensor x = randn({rows, cols}, 5);
  std::vector<float> y(static_cast<size_t>(rows * cols));
  const float* px = x.data<float>();
  Timing loop = time_it([&] {
    for (int64_t r = 0; r < rows; ++r) {
      const float* in = px + r * cols;
      float* o = y.data() + r * cols;
      float m = in[0];
      for (int64_t j = 1; j < cols; ++j) m = std::max(m, in[j]);
      float s = 0;
      for (int64_t j = 0; j < cols; ++j) s += (o[j] = std::exp(in[j] - m));
      for (int64_t j = 0; j < cols; ++j) o[j] /= s;
    }
  }, reps);
  Timing t = time_it([&] { softmax(x, -1); }, reps);
  const double bytes = 8.0 * double(rows * cols);
  out.push_back({"ops", "softmax f32 " + std::to_string(rows) + "x" + std::to_string(cols), bytes / t.median_s / 1e9,
                 "GB/s", t.spread(), "plain loop (1 thr)", bytes / loop.median_s / 1e9});
}

void add_conv(std::vector<Result>& out, int64_t batch, int64_t hw, int64_t cin, int64_t cout, int reps) {
  Tensor x = randn({batch, hw, hw, cin}, 6), w = randn({3, 3, cin, cout}, 7);
  const int64_t oh = hw - 2;
  const double flops = 2.0 * double(batch * oh * oh) * double(9 * cin) * double(cout);
  Timing t = time_it([&] { conv2d(x, w, {1, 1}, Padding::Valid); }, reps);
  // Baseline: the single GEMM an im2col convolution reduces to, through OpenBLAS.
  const int64_t m = batch * oh * oh, k = 9 * cin;
  Tensor col = randn({m, k}, 8);
  std::vector<float> c(static_cast<size_t>(m * cout));
  Timing tb = time_reference_sgemm(m, cout, k, col.data<float>(), w.data<float>(), c.data(), num_threads(), reps);
  out.push_back({"ops",
                 "conv2d 3x3 " + std::to_string(batch) + "x" + std::to_string(hw) + "x" + std::to_string(hw) + "x" +
                     std::to_string(cin) + "->" + std::to_string(cout),
                 flops / t.median_s / 1e9, "GFLOP/s", t.spread(), std::string(kBlasName) + " of the im2col GEMM",
                 flops / tb.median_s / 1e9});
}

}  // namespace

std::vector<Result> ops_suite(const Options& o) {
  std::vector<Result> out;
  const int reps = o.quick ? 2 : 7;
  for (int64_t n : o.quick ? std::vector<int64_t>{128, 256} : std::vector<int64_t>{256, 512, 1024, 2048, 4096}) {
    add_matmul(out, n, n >= 2048 ? std::max(2, reps / 2) : reps);
  }
  add_elementwise(out, o.quick ? (int64_t(1) << 20) : (int64_t(16) << 20), reps);
  add_softmax(out, o.quick ? 64 : 1024, 1024, reps);
  if (o.quick) {
    add_conv(out, 4, 14, 8, 16, reps);
  } else {
    add_conv(out, 64, 28, 1, 32, reps);
    add_conv(out, 64, 26, 32, 64, reps);
  }
  return out;
}

}  // namespace strata::bench
