// ops suite: CPU kernels against the hardware and against reference implementations
// measured in the same run (OpenBLAS sgemm, Eigen's own GEMM, memcpy, plain loops). Builds
// without OpenBLAS (STRATA_WITH_OPENBLAS=OFF) use Eigen's GEMM where OpenBLAS's would be.
#include "strata_build_config.h"

#if STRATA_HAS_OPENBLAS
#include <cblas.h>
#endif

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
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

// The reference GEMM, c[m x n] = op(a) op(b) row-major (op = transpose when ta / tb), on
// `threads` threads of the library's own: OpenBLAS's sgemm, or Eigen's product in builds
// without OpenBLAS. `inner` calls per repetition.
#if STRATA_HAS_OPENBLAS
const char* const kBlasName = "OpenBLAS sgemm";
#else
const char* const kBlasName = "Eigen GEMM";
#endif
Timing time_reference_sgemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c, int threads,
                            int reps, bool ta = false, bool tb = false, int inner = 1, int warmup = 2) {
#if STRATA_HAS_OPENBLAS
  openblas_set_num_threads(threads);
  const int lda = int(ta ? m : k), ldb = int(tb ? k : n);
  Timing t = time_it([&] {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n),
                int(k), 1.0f, a, lda, b, ldb, 0.0f, c, int(n));
  }, reps, inner, warmup);
  openblas_set_num_threads(1);
  return t;
#else
  using RowMajor = Eigen::Matrix<float, -1, -1, Eigen::RowMajor>;
  Eigen::setNbThreads(threads);
  Eigen::Map<const RowMajor> ea(a, ta ? k : m, ta ? m : k), eb(b, tb ? n : k, tb ? k : n);
  Eigen::Map<RowMajor> ec(c, m, n);
  return time_it([&] {
    if (ta && tb) {
      ec.noalias() = ea.transpose() * eb.transpose();
    } else if (ta) {
      ec.noalias() = ea.transpose() * eb;
    } else if (tb) {
      ec.noalias() = ea * eb.transpose();
    } else {
      ec.noalias() = ea * eb;
    }
  }, reps, inner, warmup);
#endif
}

// OpenBLAS's threads poll for ~0.1 s (2^28 cycles) after a multi-threaded call before
// they sleep; strata's own timing must not share the cores with them.
void let_reference_threads_sleep(int threads) {
#if STRATA_HAS_OPENBLAS
  if (threads > 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
#else
  (void)threads;
#endif
}

// strata's matmul of an m x n x k product (operands stored transposed when ta / tb) and
// the reference GEMM on the same operands, in alternating rounds (strata, then the
// reference, then a pause for the reference's threads) so that a load change on the
// machine hits both; each round times enough calls for ~2 ms. Each side first runs at
// least ~3 ms of the same calls untimed: strata's round follows the 150 ms pause, in
// which other processes evict the operands from the caches and the pool's workers fall
// asleep, while the reference's round follows strata's on warm operands -- with one
// warm-up call, that order alone cost strata 5-15% on the MLP's ~0.5-1 ms products
// (measured: the same split timed warm ran level with OpenBLAS). Returns strata's and the
// reference's medians over the rounds and the median of the per-round ratios (reference
// time / strata time: robust to load drifting between rounds); best_ratio compares the
// fastest rounds (the least disturbed by other processes on a loaded machine).
struct PairTiming {
  Timing ours, ref;
  double paired_ratio = 0;
};
PairTiming time_matmul_pair(int64_t m, int64_t n, int64_t k, bool ta, bool tb, int rounds) {
  Tensor a = random::normal(ta ? Shape{k, m} : Shape{m, k}, 1);
  Tensor b = random::normal(tb ? Shape{n, k} : Shape{k, n}, 2);
  std::vector<float> c(static_cast<size_t>(m * n));
  const double flops = 2.0 * double(m) * double(n) * double(k);
  const int inner = int(std::clamp(2e-3 / (flops / 100e9), 1.0, 400.0));
  const int warmup = std::max(inner, int(std::ceil(3e-3 / (flops / 100e9))));
  const int threads = num_threads();
  std::vector<double> ours, ref;
  Timing t;
  for (int r = 0; r < rounds; ++r) {
    t = time_it([&] { matmul(a, b, ta, tb); }, 1, inner, warmup);
    ours.push_back(t.median_s);
    t = time_reference_sgemm(m, n, k, a.data<float>(), b.data<float>(), c.data(), threads, 1, ta, tb, inner, warmup);
    ref.push_back(t.median_s);
    let_reference_threads_sleep(threads);
  }
  std::vector<double> ratios;
  for (size_t i = 0; i < ours.size(); ++i) ratios.push_back(ref[i] / ours[i]);
  return {summarize(ours), summarize(ref), summarize(ratios).median_s};
}

// `ours` and `ref` timed in alternating rounds (ours, then ref), each round `inner` calls
// after a warm-up of both: their medians over the rounds and the median of the per-round
// ratios (ref time / our time), which a load change between rounds does not bias.
PairTiming time_pair(const std::function<void()>& ours, const std::function<void()>& ref, int rounds, int inner) {
  std::vector<double> a, b, ratios;
  for (int r = 0; r < rounds; ++r) {
    a.push_back(time_it(ours, 1, inner, r == 0 ? 2 : 0).median_s);
    b.push_back(time_it(ref, 1, inner, r == 0 ? 2 : 0).median_s);
    ratios.push_back(b.back() / a.back());
  }
  return {summarize(a), summarize(b), summarize(ratios).median_s};
}

// memcpy of n floats from src to dst split into one part per intra-op thread on strata's
// own pool, as an op's kernel is: the same wake-ups, so the comparison is of the work.
void pooled_memcpy(float* dst, const float* src, int64_t n) {
  parallel_for_parts(n, num_threads(), [&](int64_t b, int64_t e) {
    std::memcpy(dst + b, src + b, size_t(e - b) * sizeof(float));
  });
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

void add_matmul(std::vector<Result>& out, int64_t n, int rounds) {
  const double flops = 2.0 * double(n) * double(n) * double(n);
  const int threads = num_threads();
  const PairTiming pair = time_matmul_pair(n, n, n, false, false, rounds);
  const Timing& ts = pair.ours;
  const Timing& tb = pair.ref;
  Tensor a = randn({n, n}, 1), b = randn({n, n}, 2);
  Eigen::setNbThreads(threads);
  Eigen::Map<const Eigen::Matrix<float, -1, -1, Eigen::RowMajor>> ea(a.data<float>(), n, n), eb(b.data<float>(), n, n);
  Eigen::Matrix<float, -1, -1, Eigen::RowMajor> ec(n, n);
  Timing te = time_it([&] { ec.noalias() = ea * eb; }, rounds);
  const std::string name = "matmul f32 " + std::to_string(n) + "^3";
  out.push_back({"ops", name, flops / ts.median_s / 1e9, "GFLOP/s", ts.spread(),
                 std::string(kBlasName) + " (" + std::to_string(threads) + " thr)", flops / tb.median_s / 1e9,
                 false, {{"paired_ratio", pair.paired_ratio}, {"best_ratio", pair.ref.min_s / pair.ours.min_s}}});
  out.push_back({"ops", name + " (Eigen GEMM)", flops / te.median_s / 1e9, "GFLOP/s", te.spread(),
                 "strata matmul", flops / ts.median_s / 1e9});
  const double peak = peak_gflops_per_core() * threads;
  if (peak > 0) {
    out.push_back({"ops", name + " (fraction of peak)", flops / ts.median_s / 1e9, "GFLOP/s", ts.spread(),
                   "machine peak " + std::to_string(int(peak)) + " GFLOP/s", peak});
  }
}

// The GEMMs of a training step, with the transposes autograd issues: for a dense layer
// y = x w (x: batch x in, w: in x out) the forward product, dW = x^T dy and dx = dy w^T.
void add_training_gemm(std::vector<Result>& out, const Options& o, const std::string& what, int64_t m, int64_t n,
                       int64_t k, bool ta, bool tb, int rounds) {
  const double flops = 2.0 * double(m) * double(n) * double(k);
  const std::string name = "matmul f32 " + what + " " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                           std::to_string(k) + (ta ? " A^T" : "") + (tb ? " B^T" : "");
  if (!o.selects(name)) return;
  const PairTiming pair = time_matmul_pair(m, n, k, ta, tb, rounds);
  out.push_back({"ops", name, flops / pair.ours.median_s / 1e9, "GFLOP/s", pair.ours.spread(),
                 std::string(kBlasName) + " (" + std::to_string(num_threads()) + " thr)",
                 flops / pair.ref.median_s / 1e9, false, {{"paired_ratio", pair.paired_ratio}, {"best_ratio", pair.ref.min_s / pair.ours.min_s}}});
}

void add_training_gemms(std::vector<Result>& out, const Options& o, int rounds) {
  const bool quick = o.quick;
  // MLP 784-512-512-10 at batch 128 and 64: forward, dW and (past the first layer) dx.
  const int64_t widths[] = {784, 512, 512, 10};
  for (int64_t batch : quick ? std::vector<int64_t>{128} : std::vector<int64_t>{128, 64}) {
    for (int l = 0; l < 3; ++l) {
      const int64_t in = widths[l], width = widths[l + 1];
      const std::string layer = "mlp b" + std::to_string(batch) + " " + std::to_string(in) + "-" + std::to_string(width);
      add_training_gemm(out, o, layer + " fwd", batch, width, in, false, false, rounds);
      add_training_gemm(out, o, layer + " dW", in, width, batch, true, false, rounds);
      if (l > 0) add_training_gemm(out, o, layer + " dx", batch, in, width, false, true, rounds);
    }
  }
  if (quick) return;
  // MNIST CNN, batch 64: the im2col GEMMs of conv 3x3 1->32 (26x26) and 32->64 (24x24) with
  // their weight and input gradients, then dense 9216->128 and 128->10.
  const int64_t b = 64;
  add_training_gemm(out, o, "cnn conv1 fwd", b * 26 * 26, 32, 9, false, false, rounds);
  add_training_gemm(out, o, "cnn conv1 dW", 9, 32, b * 26 * 26, true, false, rounds);
  add_training_gemm(out, o, "cnn conv2 fwd", b * 24 * 24, 64, 288, false, false, rounds);
  add_training_gemm(out, o, "cnn conv2 dW", 288, 64, b * 24 * 24, true, false, rounds);
  add_training_gemm(out, o, "cnn conv2 dcol", b * 24 * 24, 288, 64, false, true, rounds);
  add_training_gemm(out, o, "cnn dense1 fwd", b, 128, 9216, false, false, rounds);
  add_training_gemm(out, o, "cnn dense1 dW", 9216, 128, b, true, false, rounds);
  add_training_gemm(out, o, "cnn dense1 dx", b, 9216, 128, false, true, rounds);
  add_training_gemm(out, o, "cnn dense2 fwd", b, 10, 128, false, false, rounds);
  add_training_gemm(out, o, "cnn dense2 dW", 128, 10, b, true, false, rounds);
  add_training_gemm(out, o, "cnn dense2 dx", b, 128, 10, false, true, rounds);
}

void add_elementwise(std::vector<Result>& out, const Options& o, int64_t n, int reps) {
  const std::string sz = std::to_string(n >> 20) + "M";
  const std::string add_name = "add f32 " + sz, mul_name = "mul f32 " + sz, sum_name = "sum f32 " + sz;
  const std::string gelu_name = "gelu f32 " + sz, gelu_tanh_name = "gelu (tanh) f32 " + sz;
  const std::string relu_grad_name = "relu_grad f32 " + sz;
  if (!o.selects(add_name) && !o.selects(mul_name) && !o.selects(sum_name) && !o.selects(gelu_name) &&
      !o.selects(gelu_tanh_name) && !o.selects(relu_grad_name)) {
    return;
  }
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
  if (o.selects(add_name) || o.selects(mul_name)) {
    Timing loop_add = time_it([&] {
      plain([&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) c[size_t(i)] = pa[i] + pb[i];
      });
    }, reps);
    if (o.selects(add_name)) {
      Timing t_add = time_it([&] { add(a, b); }, reps);
      out.push_back({"ops", add_name, bytes3 / t_add.median_s / 1e9, "GB/s", t_add.spread(), "plain loop c=a+b",
                     bytes3 / loop_add.median_s / 1e9});
    }
    if (o.selects(mul_name)) {
      Timing t_mul = time_it([&] { mul(a, b); }, reps);
      out.push_back({"ops", mul_name, bytes3 / t_mul.median_s / 1e9, "GB/s", t_mul.spread(), "plain loop c=a+b",
                     bytes3 / loop_add.median_s / 1e9});
    }
  }
  // relu's gradient (g where x > 0, else 0) against the same select in a plain loop; the
  // composite it replaced in relu's backward (a bool mask, then a select) is printed after.
  if (o.selects(relu_grad_name)) {
    Timing loop = time_it([&] {
      plain([&](int64_t s, int64_t e) {
        // Restrict-qualified, so that the compiler vectorises the select instead of a
        // branch on the sign of random data.
        float* __restrict pc = c.data();
        const float* __restrict x = pa;
        const float* __restrict g = pb;
        for (int64_t i = s; i < e; ++i) pc[i] = x[i] > 0.0f ? g[i] : 0.0f;
      });
    }, reps);
    Timing fused = time_it([&] { relu_grad(a, b); }, reps);
    const Tensor zero = Tensor::scalar(0.0, kFloat32);
    Timing composite = time_it([&] { where(greater(a, zero), b, zero); }, reps);
    out.push_back({"ops", relu_grad_name, bytes3 / fused.median_s / 1e9, "GB/s", fused.spread(),
                   "plain loop c = a > 0 ? b : 0", bytes3 / loop.median_s / 1e9, false,
                   {{"where_greater_gbps", bytes3 / composite.median_s / 1e9}}});
  }
  // gelu against memcpy of the same bytes (read n floats, write n), in alternating rounds.
  auto memcpy_all = [&] {
    plain([&](int64_t s, int64_t e) { std::memcpy(c.data() + s, pa + s, size_t(e - s) * 4); });
  };
  for (bool tanh_form : {false, true}) {
    const std::string& name = tanh_form ? gelu_tanh_name : gelu_name;
    if (!o.selects(name)) continue;
    const PairTiming p = time_pair([&] { gelu(a, tanh_form); }, memcpy_all, reps, 1);
    out.push_back({"ops", name, bytes2 / p.ours.median_s / 1e9, "GB/s", p.ours.spread(), "memcpy",
                   bytes2 / p.ref.median_s / 1e9, false, {{"paired_ratio", p.paired_ratio}}});
  }
  if (o.selects(sum_name)) {
    double s = 0;
    Timing loop_sum = time_it([&] {
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += pa[i];
      s = acc;
    }, reps);
    Timing t_sum = time_it([&] { sum(a); }, reps);
    out.push_back({"ops", sum_name, 4.0 * double(n) / t_sum.median_s / 1e9, "GB/s", t_sum.spread(),
                   "plain loop (1 thr, double acc)", 4.0 * double(n) / loop_sum.median_s / 1e9});
    (void)s;
  }
}

// Softmax, log-softmax and sparse softmax cross-entropy over rows x cols float32 logits:
// softmax against a plain single-thread loop (max, exp-and-sum, divide), softmax and
// log-softmax against memcpy of the same bytes (rows x cols floats read, as many written)
// on strata's pool, in alternating rounds; cross-entropy (reads the logits, writes one
// float a row) against a plain single-thread loop.
void add_softmax(std::vector<Result>& out, const Options& o, int64_t rows, int64_t cols, int reps) {
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
  const std::string sm = "softmax f32 " + shape, sm_copy = sm + " (vs memcpy)",
                    lsm_copy = "log_softmax f32 " + shape + " (vs memcpy)", xent = "sparse xent f32 " + shape;
  if (!o.selects(sm) && !o.selects(sm_copy) && !o.selects(lsm_copy) && !o.selects(xent)) return;
  Tensor x = randn({rows, cols}, 5);
  std::vector<float> y(static_cast<size_t>(rows * cols));
  const float* px = x.data<float>();
  const double bytes = 8.0 * double(rows * cols);
  // About 2 ms of calls per timed round.
  const int inner = int(std::clamp(2e-3 / (bytes / 10e9), 1.0, 200.0));
  if (o.selects(sm)) {
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
    Timing t = time_it([&] { softmax(x, -1); }, reps, inner);
    out.push_back({"ops", sm, bytes / t.median_s / 1e9, "GB/s", t.spread(), "plain loop (1 thr)",
                   bytes / loop.median_s / 1e9});
  }
  const std::string copy_name = "memcpy, same bytes (" + std::to_string(num_threads()) + " thr)";
  for (bool log_space : {false, true}) {
    const std::string& name = log_space ? lsm_copy : sm_copy;
    if (!o.selects(name)) continue;
    const PairTiming p = time_pair([&] { log_space ? log_softmax(x, -1) : softmax(x, -1); },
                                   [&] { pooled_memcpy(y.data(), px, rows * cols); }, reps, inner);
    out.push_back({"ops", name, bytes / p.ours.median_s / 1e9, "GB/s", p.ours.spread(), copy_name,
                   bytes / p.ref.median_s / 1e9, false, {{"paired_ratio", p.paired_ratio}}});
  }
  if (o.selects(xent)) {
    std::vector<int64_t> lab(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) lab[size_t(r)] = (r * 7919) % cols;
    const Tensor labels = Tensor::from_vector(lab);
    Timing loop = time_it([&] {
      for (int64_t r = 0; r < rows; ++r) {
        const float* in = px + r * cols;
        float m = in[0];
        for (int64_t j = 1; j < cols; ++j) m = std::max(m, in[j]);
        float s = 0;
        for (int64_t j = 0; j < cols; ++j) s += std::exp(in[j] - m);
        y[size_t(r)] = std::log(s) + m - in[lab[size_t(r)]];
      }
    }, reps);
    Timing t = time_it([&] { sparse_softmax_cross_entropy(x, labels); }, reps, inner);
    const double read = 4.0 * double(rows * cols);
    out.push_back({"ops", xent, read / t.median_s / 1e9, "GB/s", t.spread(), "plain loop (1 thr)",
                   read / loop.median_s / 1e9});
  }
}

// conv2d (VALID, stride 1), its filter gradient and, where the input has channels to compute
// a gradient for, its input gradient, each against the single GEMM the im2col path reduces
// it to, through OpenBLAS: col W for conv2d, col^T dy for the filter gradient, dy W^T
// (before col2im) for the input gradient.
void add_conv(std::vector<Result>& out, const Options& o, int64_t batch, int64_t hw, int64_t cin, int64_t cout,
              int reps) {
  const std::string shape = "3x3 " + std::to_string(batch) + "x" + std::to_string(hw) + "x" + std::to_string(hw) +
                            "x" + std::to_string(cin);
  const std::string name = "conv2d " + shape + "->" + std::to_string(cout);
  const std::string grad = "conv2d_backprop_input " + shape + "<-" + std::to_string(cout);
  const std::string filter_grad = "conv2d_backprop_filter " + shape + "->" + std::to_string(cout);
  const bool forward = o.selects(name), backward = cin > 1 && o.selects(grad), filter = o.selects(filter_grad);
  if (!forward && !backward && !filter) return;
  Tensor x = randn({batch, hw, hw, cin}, 6), w = randn({3, 3, cin, cout}, 7);
  const int64_t oh = hw - 2;
  const int64_t m = batch * oh * oh, k = 9 * cin;
  const double flops = 2.0 * double(m) * double(k) * double(cout);
  if (forward) {
    Timing t = time_it([&] { conv2d(x, w, {1, 1}, Padding::Valid); }, reps);
    Tensor col = randn({m, k}, 8);
    std::vector<float> c(static_cast<size_t>(m * cout));
    Timing tb = time_reference_sgemm(m, cout, k, col.data<float>(), w.data<float>(), c.data(), num_threads(), reps);
    out.push_back({"ops", name, flops / t.median_s / 1e9, "GFLOP/s", t.spread(),
                   std::string(kBlasName) + " of the im2col GEMM", flops / tb.median_s / 1e9});
  }
  if (backward) {
    Tensor dy = randn({batch, oh, oh, cout}, 9);
    Timing t = time_it([&] { conv2d_backprop_input(x.shape(), w, dy, {1, 1}, Padding::Valid); }, reps);
    std::vector<float> dcol(static_cast<size_t>(m * k));
    Timing tb = time_reference_sgemm(m, k, cout, dy.data<float>(), w.data<float>(), dcol.data(), num_threads(), reps,
                                     false, true);
    out.push_back({"ops", grad, flops / t.median_s / 1e9, "GFLOP/s", t.spread(),
                   std::string(kBlasName) + " of the im2col GEMM", flops / tb.median_s / 1e9});
  }
  if (filter) {
    Tensor dy = randn({batch, oh, oh, cout}, 11), col = randn({m, k}, 12);
    Timing t = time_it([&] { conv2d_backprop_filter(x, w.shape(), dy, {1, 1}, Padding::Valid); }, reps);
    std::vector<float> dw(static_cast<size_t>(k * cout));
    Timing tb = time_reference_sgemm(k, cout, m, col.data<float>(), dy.data<float>(), dw.data(), num_threads(), reps,
                                     true, false);
    out.push_back({"ops", filter_grad, flops / t.median_s / 1e9, "GFLOP/s", t.spread(),
                   std::string(kBlasName) + " of the im2col GEMM", flops / tb.median_s / 1e9});
  }
}

}  // namespace

std::vector<Result> ops_suite(const Options& o) {
  std::vector<Result> out;
  const int reps = o.quick ? 2 : 7;
  // OpenBLAS starts its worker threads when the library loads, and each spins in
  // sched_yield for its timeout (~75 ms here) before it sleeps: measured with perf, a
  // --filter run's first rows (dense2's, ~0.3 s in all) shared the machine with that
  // spinning. The suite starts once it is over.
  let_reference_threads_sleep(2);
  for (int64_t n : o.quick ? std::vector<int64_t>{128, 256} : std::vector<int64_t>{128, 256, 512, 1024, 2048, 4096}) {
    const std::string name = "matmul f32 " + std::to_string(n) + "^3";
    if (o.selects(name) || o.selects(name + " (Eigen GEMM)") || o.selects(name + " (fraction of peak)")) {
      add_matmul(out, n, n >= 2048 ? std::max(3, reps / 2) : reps);
    }
  }
  add_training_gemms(out, o, reps);
  add_elementwise(out, o, o.quick ? (int64_t(1) << 20) : (int64_t(16) << 20), reps);
  add_softmax(out, o, o.quick ? 64 : 1024, 1024, reps);
  if (o.quick) {
    add_conv(out, o, 4, 14, 8, 16, reps);
  } else {
    add_conv(out, o, 64, 28, 1, 32, reps);
    add_conv(out, o, 64, 26, 32, 64, reps);
  }
  return out;
}

}  // namespace strata::bench
