// The Shape and Optimizer kernel families (kernels/cuda/shape.cuh, optimizer.cuh) on the
// emulated device, for what the op-info samples miss: deferred gather/scatter_add index
// errors, atomics with repeated indices in float16/bfloat16, batched launches (more
// inputs than one launch carries), grid-stride sizes, non-finite values at the very
// end of all_finite's inputs, and SGD/Adam steps bitwise against the CPU kernels.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <strata/core/ops.h>
#include <strata/core/random.h>
#include <strata/core/stream.h>
#include "tests/cuda/parity.h"
#include "tests/cuda_emulation/emulated_runtime.h"
#include "tests/cuda_emulation/error_capture.h"

using namespace strata;
using strata::testing::mismatch;
using strata::testing::Tolerance;

namespace {

Tensor on_cpu(const Tensor& t) { return t.to(Device()); }
Tensor on_dev(const Tensor& t) { return t.to(cuda(0)); }

using cuda_testing::deferred_error;
const auto cpu_error = [](auto&& fn) { return cuda_testing::error_of(fn); };

}  // namespace

TEST_CASE("emulated CUDA: an out-of-range gather index is raised at the next synchronisation",
          "[cuda-emulation]") {
  const Tensor x = arange(0, 12, 1, kFloat32).reshape({4, 3});
  const Tensor xd = on_dev(x);
  for (DType it : {kInt64, kInt32}) {
    INFO(dtype_name(it));
    // Two bad indices: the CPU names the first (position 2, value 7), and so must the device.
    const Tensor idx = Tensor::from_vector<int64_t>({1, 3, 7, 0, -2, 2}, {6}).cast(it);
    const std::string want = cpu_error([&] { (void)gather(x, idx, 0); });
    REQUIRE(want == "gather: index 7 is out of range for axis 0 of extent 4");
    Tensor got;
    REQUIRE_NOTHROW(got = gather(xd, on_dev(idx), 0));  // not at the call
    CHECK(deferred_error() == want);
    CHECK(deferred_error().empty());  // raised once, then cleared
    // The other rows were copied, the bad one zeroed; a host read works again.
    const std::vector<float> v = on_cpu(got).to_vector<float>();
    CHECK(std::vector<float>(v.begin(), v.begin() + 6) == std::vector<float>{3, 4, 5, 9, 10, 11});
    CHECK(std::vector<float>(v.begin() + 6, v.begin() + 9) == std::vector<float>{0, 0, 0});
  }
  // Along axis 1 of a transposed view, by a strided index tensor: the first bad one in the
  // index tensor's row-major order (position 3 here, value -1) is the one reported.
  const Tensor idx2 = Tensor::from_vector<int64_t>({0, 9, 1, 5, 2, -1, 3, 4}, {2, 4});
  const Tensor view_idx = transpose(idx2, {1, 0});  // [[0,2],[9,-1],[1,3],[5,4]]
  const std::string want2 = cpu_error([&] { (void)gather(transpose(x, {1, 0}), view_idx, 1); });
  REQUIRE(want2 == "gather: index 9 is out of range for axis 1 of extent 4");
  (void)gather(transpose(xd, {1, 0}), transpose(on_dev(idx2), {1, 0}), 1);
  CHECK(deferred_error() == want2);
  // Block 0 finds the first bad index for any block size (96 threads for 70 indices) and
  // with indices beyond one block (300).
  for (int64_t count : {70, 300}) {
    INFO(count << " indices");
    std::vector<int64_t> many(size_t(count), 1);
    many[size_t(count) - 4] = 10;
    many[size_t(count) - 1] = -3;
    const Tensor mi = Tensor::from_vector<int64_t>(many, {count});
    const Tensor v5 = arange(0, 5, 1, kFloat32);
    const std::string want_many = cpu_error([&] { (void)gather(v5, mi, 0); });
    REQUIRE(want_many == "gather: index 10 is out of range for axis 0 of extent 5");
    (void)gather(on_dev(v5), on_dev(mi), 0);
    CHECK(deferred_error() == want_many);
  }
  // A host read raises it too, and a rank-0 host index is checked on the device as well.
  const Tensor bad = gather(xd, Tensor::scalar(4.0, kInt64), 0);
  REQUIRE(Tensor::scalar(4.0, kInt64).device().is_cpu());
  CHECK_THROWS_WITH(bad.to_vector<float>(), "gather: index 4 is out of range for axis 0 of extent 4");
  // scatter_add defers the same way, with its own name.
  const Tensor upd = ones({3, 3}).to(cuda(0));
  const Tensor sidx = Tensor::from_vector<int32_t>({0, 5, 1}, {3}).to(cuda(0));
  (void)scatter_add(upd, sidx, {4, 3}, 0);
  CHECK(deferred_error() == cpu_error([] {
          (void)scatter_add(ones({3, 3}), Tensor::from_vector<int32_t>({0, 5, 1}, {3}), {4, 3}, 0);
        }));
  CHECK(deferred_error().empty());
}

TEST_CASE("emulated CUDA: scatter_add with repeated indices in float16 and bfloat16", "[cuda-emulation]") {
  for (DType dt : {kFloat16, kBFloat16, kFloat32, kFloat64, kInt32, kInt64}) {
    INFO(dtype_name(dt));
    // 300 rows into 3: each output row takes ~100 atomic adds, in an order that varies
    // between runs, over more elements than the emulated grid holds (grid-stride loop).
    const Tensor idx = random::uniform({300}, 3, 0.0, 3.0).cast(kInt64);
    // Small integers: every partial sum (< 256) is exact in every dtype, so any order
    // gives the CPU's result exactly.
    const Tensor ints = random::uniform({300, 4}, 4, 0.0, 3.0).cast(kInt32).cast(dt);
    CHECK(mismatch(on_cpu(scatter_add(on_dev(ints), on_dev(idx), {3, 4}, 0)), scatter_add(ints, idx, {3, 4}, 0),
                   Tolerance{})
              .empty());
  }
  for (DType dt : {kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    // Arbitrary values: the order changes the rounding. Each addition is off by at most
    // half an ulp of a partial sum, and every partial sum is at most S = sum |u| of the
    // row, so both results lie within adds * (eps / 2) * S of the exact sum.
    const Tensor idx = Tensor::from_vector<int64_t>({0, 1, 0, 2, 0, 3, 0, 1, 1, 0, 2, 0, 0, 3, 1, 0,
                                                     0, 2, 0, 0, 1, 0, 3, 0, 0, 1, 0, 0, 2, 0, 0, 0},
                                                    {32});
    const Tensor u = random::uniform({32, 3}, 8, -1.0, 1.0, dt);
    const Tensor got = on_cpu(scatter_add(on_dev(u), on_dev(idx), {4, 3}, 0)).cast(kFloat64);
    const Tensor cpu = scatter_add(u, idx, {4, 3}, 0).cast(kFloat64);
    const Tensor exact = scatter_add(u.cast(kFloat64), idx, {4, 3}, 0);
    const Tensor s = scatter_add(abs(u.cast(kFloat64)), idx, {4, 3}, 0);
    const Tensor adds = scatter_add(ones({32, 3}, kFloat64), idx, {4, 3}, 0);
    const double half_eps = dt == kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const std::vector<double> g = got.to_vector<double>(), c = cpu.to_vector<double>(),
                              e = exact.to_vector<double>(), sv = s.to_vector<double>(),
                              n = adds.to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) {
      INFO("element " << i);
      const double bound = n[i] * half_eps * sv[i];
      CHECK(std::abs(g[i] - e[i]) <= bound);
      CHECK(std::abs(c[i] - e[i]) <= bound);
    }
  }
}

TEST_CASE("emulated CUDA: shape ops beyond the op-info samples", "[cuda-emulation]") {
  // The emulator runs one std::thread per CUDA thread (slowly, more so under TSan): the
  // multi-block cases run in one dtype each, the one-block ones in four element sizes.
  // concat of 17 strided inputs (two launches of a batch), on a middle and the last axis.
  std::vector<Tensor> mid, mid_d, last, last_d;
  for (int i = 0; i < 17; ++i) {
    const Tensor p = random::uniform({3, 2 + i % 3, 4}, uint64_t(100 + i), -3.0, 3.0, kFloat16);
    mid.push_back(transpose(p, {2, 1, 0}));
    mid_d.push_back(transpose(on_dev(p), {2, 1, 0}));
    const Tensor q = random::uniform({1 + i % 3, 2, 4}, uint64_t(150 + i), -3.0, 3.0).cast(kInt64);
    last.push_back(transpose(q, {2, 1, 0}));
    last_d.push_back(transpose(on_dev(q), {2, 1, 0}));
  }
  CHECK(mismatch(on_cpu(concat(mid_d, 1)), concat(mid, 1), Tolerance{}).empty());
  CHECK(mismatch(on_cpu(concat(last_d, 2)), concat(last, 2), Tolerance{}).empty());
  // pad and gather larger than the emulated grid (grid-stride loops).
  const Tensor big = random::uniform({40, 30}, 9, -3.0, 3.0);
  CHECK(mismatch(on_cpu(pad(on_dev(big), {{3, 1}, {0, 2}}, 2.0)), pad(big, {{3, 1}, {0, 2}}, 2.0), Tolerance{})
            .empty());
  const Tensor ids = random::uniform({25, 2}, 10, 0.0, 40.0).cast(kInt64);
  CHECK(mismatch(on_cpu(gather(on_dev(big), on_dev(ids), 0)), gather(big, ids, 0), Tolerance{}).empty());
  for (DType dt : {kFloat32, kFloat16, kInt64, kBool}) {
    INFO(dtype_name(dt));
    // pad of a rank-6 strided view, padded on some axes only (the others merge), and of
    // an empty tensor.
    const Tensor x = random::uniform({2, 3, 1, 2, 3, 2}, 7, -3.0, 3.0).cast(dt);
    const std::vector<int64_t> perm{0, 1, 2, 4, 3, 5};
    const std::vector<std::pair<int64_t, int64_t>> pads{{0, 0}, {0, 0}, {1, 1}, {0, 0}, {2, 0}, {0, 0}};
    CHECK(mismatch(on_cpu(pad(permute(on_dev(x), perm), pads, -1.5)), pad(permute(x, perm), pads, -1.5),
                   Tolerance{})
              .empty());
    CHECK(mismatch(on_cpu(pad(on_dev(zeros({0, 3}, dt)), {{1, 1}, {0, 1}}, 1.0)),
                   pad(zeros({0, 3}, dt), {{1, 1}, {0, 1}}, 1.0), Tolerance{})
              .empty());
    // gather by a rank-0 host index.
    const Tensor table = random::uniform({4, 30}, 11, -3.0, 3.0).cast(dt);
    const Tensor host_idx = Tensor::scalar(2.0, kInt32);
    CHECK(mismatch(on_cpu(gather(on_dev(table), host_idx, 0)), gather(table, host_idx, 0), Tolerance{}).empty());
    // one_hot: indices outside [0, depth) give all-zero rows.
    const Tensor oh = Tensor::from_vector<int64_t>({2, -1, 0, 5, 4, 3}, {2, 3});
    CHECK(mismatch(on_cpu(one_hot(on_dev(oh), 5, dt)), one_hot(oh, 5, dt), Tolerance{}).empty());
    CHECK(mismatch(on_cpu(one_hot(transpose(on_dev(oh.cast(kInt32)), {1, 0}), 4, dt)),
                   one_hot(transpose(oh.cast(kInt32), {1, 0}), 4, dt), Tolerance{})
              .empty());
  }
  // Empty operands: nothing to copy, and no launch that would read them.
  CHECK(on_cpu(gather(on_dev(ones({4, 3})), on_dev(zeros({0}, kInt64)), 0)).shape() == Shape{0, 3});
  CHECK(mismatch(on_cpu(scatter_add(on_dev(ones({0, 3})), on_dev(zeros({0}, kInt64)), {2, 3}, 0)), zeros({2, 3}),
                 Tolerance{})
            .empty());
}

TEST_CASE("emulated CUDA: all_finite finds a non-finite value in the last element of the last tensor",
          "[cuda-emulation]") {
  // Finite tensors: 17 float32 ones (more than one launch carries), half of them
  // transposed, one of each other float dtype, a non-float one (ignored), and a float64
  // one larger than the emulated grid.
  std::vector<Tensor> ts, ts_d;
  auto add = [&](const Tensor& t, bool transposed) {
    ts.push_back(transposed ? transpose(t, {1, 0}) : t);
    ts_d.push_back(transposed ? transpose(on_dev(t), {1, 0}) : on_dev(t));
  };
  for (int i = 0; i < 17; ++i) add(random::uniform({2 + i % 3, 3}, uint64_t(200 + i), -1e3, 1e3), i % 2 == 1);
  for (DType dt : {kFloat64, kFloat16, kBFloat16}) add(random::uniform({3, 4}, 250, -1e3, 1e3, dt), true);
  add(Tensor::from_vector<int32_t>({1, 2, 3, 4}, {2, 2}), false);
  add(random::uniform({1500}, 300, -1e3, 1e3, kFloat64), false);
  CHECK(all_finite(ts).item<bool>());
  CHECK(on_cpu(all_finite(ts_d)).item<bool>());
  // Then a float16 transposed view whose last element (the view's [5, 30]) is the last
  // element of its [31, 6] storage too, and NaN.
  std::vector<double> v = random::uniform({31, 6}, 301, -1.0, 1.0, kFloat64).to_vector<double>();
  v.back() = std::numeric_limits<double>::quiet_NaN();
  const Tensor s = Tensor::from_vector<double>(v, {31, 6}, kFloat16);
  add(s, true);
  CHECK_FALSE(all_finite(ts).item<bool>());
  CHECK_FALSE(on_cpu(all_finite(ts_d)).item<bool>());
  // Every float dtype and special, last in the last of two tensors.
  const double specials[3] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                              -std::numeric_limits<double>::infinity()};
  for (DType last : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    INFO("last tensor " << dtype_name(last));
    for (double special : specials) {
      INFO("special " << special);
      const Tensor ok = ones({5}, kFloat32);
      const Tensor lone = Tensor::from_vector<double>({1.0, 2.0, 3.0, special}, {4}, last);
      CHECK_FALSE(all_finite({ok, lone}).item<bool>());
      CHECK_FALSE(on_cpu(all_finite({on_dev(ok), on_dev(lone)})).item<bool>());
    }
  }
  // No tensors at all: true, on the current device.
  Tensor none;
  {
    DeviceGuard on(cuda(0));
    none = all_finite({});
  }
  CHECK(none.device() == cuda(0));
  CHECK(on_cpu(none).item<bool>());
}

TEST_CASE("emulated CUDA: SGD with momentum and AdamW steps equal the CPU's bitwise", "[cuda-emulation]") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    // 600 elements: more than the emulated grid (grid-stride loop). The slots start from
    // earlier steps' values (v positive), so one step exercises every term.
    const Shape shape{6, 100};
    const Tensor p = random::uniform(shape, 1, -1.0, 1.0, dt), g = random::uniform(shape, 2, -2.0, 2.0, dt);
    const Tensor b = random::uniform(shape, 3, -0.5, 0.5, dt), m = random::uniform(shape, 4, -0.5, 0.5, dt);
    const Tensor v = random::uniform(shape, 5, 0.01, 1.0, dt);
    const Tensor gd = on_dev(g);
    auto both = [&](const char* what, auto&& update, std::vector<Tensor> state) {
      INFO(what);
      std::vector<Tensor> cpu_state, dev_state;
      for (const Tensor& t : state) {
        cpu_state.push_back(t.clone());
        dev_state.push_back(on_dev(t));
      }
      update(cpu_state, g);
      update(dev_state, gd);
      for (size_t i = 0; i < state.size(); ++i) CHECK(mismatch(on_cpu(dev_state[i]), cpu_state[i], Tolerance{}).empty());
    };
    both("SGD with momentum", [](std::vector<Tensor>& s, const Tensor& grad) {
      sgd_update(s[0], grad, s[1], SgdAttrs{0.1, 0.9, 0.0, false});
    }, {p, b});
    both("Nesterov SGD with weight decay", [](std::vector<Tensor>& s, const Tensor& grad) {
      sgd_update(s[0], grad, s[1], SgdAttrs{0.05, 0.8, 0.01, true});
    }, {p, b});
    both("AdamW step 3, transposed-back gradient", [](std::vector<Tensor>& s, const Tensor& grad) {
      adam_update(s[0], transpose(transpose(grad, {1, 0}), {1, 0}), s[1], s[2],
                  AdamAttrs{1e-2, 0.9, 0.999, 1e-7, 0.1, /*decoupled=*/true, /*step=*/3});
    }, {p, m, v});
    both("Adam with L2 step 1", [](std::vector<Tensor>& s, const Tensor& grad) {
      adam_update(s[0], grad, s[1], s[2], AdamAttrs{3e-3, 0.8, 0.99, 1e-3, 0.01, /*decoupled=*/false, /*step=*/1});
    }, {p, m, v});
  }
  // Plain SGD without a buffer, on a rank-0 parameter with a host-scalar gradient.
  Tensor p0 = Tensor::scalar(1.5), p0d = on_dev(p0);
  sgd_update(p0, Tensor::scalar(0.25), Tensor(), SgdAttrs{0.1, 0.0, 0.0, false});
  sgd_update(p0d, Tensor::scalar(0.25), Tensor(), SgdAttrs{0.1, 0.0, 0.0, false});
  CHECK(on_cpu(p0d).item<float>() == p0.item<float>());
}
