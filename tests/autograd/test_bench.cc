// Eager overhead per op (hidden: run with `strata_autograd_tests "[.bench]"`): a
// 1-element float32 add without a tape and under a tape that watches an operand, with a
// breakdown of where the time goes. Targets: <= 0.5 us and <= 1 us per op.
#include <algorithm>
#include <ctime>

#include <strata/core/dispatch.h>
#include <strata/core/recorder.h>
#include "tests/autograd/autograd_test_util.h"

using namespace strata;
using namespace strata::autograd;

namespace {

// CPU time of the calling thread in microseconds: unlike wall time it does not count
// the time this thread waits for a core, so the figures hold on a loaded machine.
double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) * 1e-3;
}

// Median over `runs` of the mean time per iteration (us) of `iters` calls of body().
template <typename Body>
double median_us(int runs, int iters, Body&& body) {
  std::vector<double> per_op;
  for (int r = 0; r < runs; ++r) {
    const double t0 = thread_cpu_us();
    for (int i = 0; i < iters; ++i) body();
    per_op.push_back((thread_cpu_us() - t0) / iters);
  }
  std::sort(per_op.begin(), per_op.end());
  return per_op[per_op.size() / 2];
}

}  // namespace

TEST_CASE("bench: eager overhead of a 1-element add", "[.bench]") {
  constexpr int kRuns = 10, kIters = 100000;
  Tensor a = tensor({1.0f});
  Tensor b = tensor({2.0f});
  Tensor sink;
  const double plain = median_us(kRuns, kIters, [&] { sink = add(a, b); });
  // A fresh watching tape per run, so each run records kIters nodes.
  std::vector<double> taped_runs;
  for (int r = 0; r < kRuns; ++r) {
    GradientTape tape;
    tape.watch(a);
    taped_runs.push_back(median_us(1, kIters, [&] { sink = add(a, b); }));
  }
  std::sort(taped_runs.begin(), taped_runs.end());
  const double taped = taped_runs[taped_runs.size() / 2];
  // The realistic shape of a training step: a tape of 1,000 ops, created, filled and
  // destroyed (its teardown counted), 100 times per run.
  const double taped_1000 = median_us(kRuns, kIters / 1000, [&] {
    GradientTape tape;
    tape.watch(a);
    for (int i = 0; i < 1000; ++i) sink = add(a, b);
  }) / 1000;
  // A tape that is active but watches neither operand (the common "inference under a
  // tape" case).
  double unwatched;
  {
    GradientTape tape;
    Tensor c = tensor({3.0f});
    tape.watch(c);
    unwatched = median_us(kRuns, kIters, [&] { sink = add(a, b); });
  }

  // Breakdown of the untaped path.
  const Shape one{1};
  const double t_empty = median_us(kRuns, kIters, [&] { sink = Tensor::empty(one, kFloat32); });
  const double t_bshape = median_us(kRuns, kIters, [&] {
    Shape s = broadcast_shapes(a.shape(), b.shape(), "add");
    if (s.size() != 1) FAIL("unexpected");
  });
  Tensor out = Tensor::empty(one, kFloat32);
  const Tensor ins[2] = {a, b};
  const Tensor outs[1] = {out};
  const OpAttrs attrs;
  const double t_kernel = median_us(kRuns, kIters, [&] { run_kernel(OpId::Add, attrs, ins, outs); });
  const double t_attrs = median_us(kRuns, kIters, [&] {
    OpAttrs at;
    if (at.step != 1) FAIL("unexpected");
  });
  double t_record;
  {
    GradientTape tape;
    tape.watch(a);
    t_record = median_us(kRuns, kIters, [&] { record_op(OpId::Add, attrs, ins, outs); });
  }

  WARN("eager 1-element add: " << plain << " us/op without a tape (target 0.5), " << taped
       << " us/op under a watching tape of 1e5 ops (target 1.0), " << taped_1000
       << " us/op under watching tapes of 1e3 ops incl. their teardown, " << unwatched
       << " us/op under a tape that watches neither operand\n"
       << "  breakdown: Tensor::empty " << t_empty << " us, broadcast_shapes " << t_bshape
       << " us, run_kernel(add) " << t_kernel << " us, OpAttrs{} " << t_attrs
       << " us, tape record " << t_record << " us");
  CHECK(plain > 0);
  CHECK(taped > 0);
}
