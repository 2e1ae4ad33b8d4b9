// The Reduce and NN kernel families (kernels/cuda/reduce.cuh, nn.cuh) on the emulated
// device, against the CPU, for what the op-info samples miss: rows longer than a block,
// odd numbers of rows and rows spread over several blocks, outputs whose elements are split
// over blocks (full reductions, few long columns) with a second pass, non-adjacent axes,
// keepdims and strided inputs, arg-reduction ties and NaN across splits, block-wide scans,
// all -inf and NaN softmax rows, and the deferred out-of-range label error.
//
// The emulated launch shapes (reduce.cuh) split an output's elements from 128 of them, so
// these shapes take every path while staying small (one std::thread per CUDA thread).
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

Tolerance tol_for(DType dt) { return cuda_testing::cuda_tolerance(dt); }

const std::vector<DType> kFloats = {kFloat32, kFloat64, kFloat16, kBFloat16};
const std::vector<DType> kNumeric = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64};

// "" when f(x on the device) matches f(x) on the CPU within the dtype's tolerance.
template <typename Fn>
std::string differs(const Tensor& x, Fn f, DType dt) {
  return mismatch(on_cpu(f(on_dev(x))), f(x), tol_for(dt));
}

using cuda_testing::deferred_error;
const auto cpu_error = [](auto&& fn) { return cuda_testing::error_of(fn); };

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("emulated CUDA: reductions of rows longer than a block, of odd row counts, and split", "[cuda-emulation]") {
  for (DType dt : kNumeric) {
    INFO(dtype_name(dt));
    const bool fl = is_floating(dt);
    // Integers: small values (sums and products stay exact); floats: no cancellation.
    const Tensor x = fl ? random::uniform({3, 300}, 1, -1.0, 2.0).cast(dt)
                        : random::uniform({3, 300}, 1, -4.0, 5.0).cast(kInt32).cast(dt);
    const Tensor signs = sub(mul(random::uniform({3, 300}, 2, 0.0, 2.0).cast(kInt32), Tensor::scalar(2.0, kInt32)),
                             Tensor::scalar(1.0, kInt32))
                             .cast(dt);  // +-1
    const Tensor near_one = fl ? random::uniform({3, 300}, 3, 0.99, 1.01).cast(dt) : signs;
    auto along = [](int64_t a) { return std::vector<int64_t>{a}; };
    // Rows of 300 (a block of 256 threads loops), 3 rows.
    CHECK(differs(x, [&](const Tensor& t) { return sum(t, along(1)); }, dt) == "");
    CHECK(differs(x, [&](const Tensor& t) { return max(t, along(1)); }, dt) == "");
    CHECK(differs(x, [&](const Tensor& t) { return min(t, along(-1), true); }, dt) == "");
    CHECK(differs(near_one, [&](const Tensor& t) { return prod(t, along(1)); }, dt) == "");
    CHECK(differs(x, [&](const Tensor& t) { return argmax(t, 1); }, dt) == "");
    CHECK(differs(x, [&](const Tensor& t) { return argmin(t, 1, true); }, dt) == "");
    // Full reductions: 900 elements split over blocks, then a second pass.
    CHECK(differs(x, [&](const Tensor& t) { return sum(t); }, dt) == "");
    CHECK(differs(x, [&](const Tensor& t) { return min(t); }, dt) == "");
    CHECK(differs(near_one, [&](const Tensor& t) { return prod(t); }, dt) == "");
    CHECK(differs(x, [&](const Tensor& t) { return argmax(reshape(t, {900}), 0); }, dt) == "");
    // Columns: 300 elements each, 3 outputs (blockDim.y threads share each column).
    CHECK(differs(x, [&](const Tensor& t) { return sum(t, along(0)); }, dt) == "");
    CHECK(differs(transpose(x, {1, 0}), [&](const Tensor& t) { return max(t, along(0)); }, dt) == "");
    CHECK(differs(transpose(x, {1, 0}).contiguous(), [&](const Tensor& t) { return argmin(t, 0); }, dt) == "");
    if (fl) {
      CHECK(differs(x, [&](const Tensor& t) { return logsumexp(t, along(1)); }, dt) == "");
      CHECK(differs(x, [&](const Tensor& t) { return logsumexp(t); }, dt) == "");
      CHECK(differs(transpose(x, {1, 0}).contiguous(), [&](const Tensor& t) { return logsumexp(t, along(0), true); },
                    dt) == "");
      CHECK(differs(x, [&](const Tensor& t) { return mean(t, along(1)); }, dt) == "");
    }
  }
}

TEST_CASE("emulated CUDA: few long columns are split over blocks", "[cuda-emulation]") {
  for (DType dt : {kFloat32, kBFloat16, kInt64}) {
    INFO(dtype_name(dt));
    const Tensor wide = random::uniform({1024, 33}, 4, -3.0, 5.0).cast(dt);  // 2 blocks of columns, 2 splits
    const Tensor narrow = random::uniform({1024, 3}, 5, -3.0, 5.0).cast(dt);  // 1 block of columns, 4 splits
    for (const Tensor& x : {wide, narrow}) {
      INFO(shape_str(x.shape()));
      CHECK(differs(x, [](const Tensor& t) { return sum(t, std::vector<int64_t>{0}); }, dt) == "");
      CHECK(differs(x, [](const Tensor& t) { return max(t, std::vector<int64_t>{0}, true); }, dt) == "");
      CHECK(differs(x, [](const Tensor& t) { return argmax(t, 0); }, dt) == "");
      CHECK(differs(x, [](const Tensor& t) { return argmin(t, 0); }, dt) == "");
      if (is_floating(dt)) {
        CHECK(differs(x, [](const Tensor& t) { return logsumexp(t, std::vector<int64_t>{0}); }, dt) == "");
      }
    }
  }
}

TEST_CASE("emulated CUDA: reductions over non-adjacent axes, keepdims, strided inputs", "[cuda-emulation]") {
  // Few launches: the emulator starts a thread per CUDA thread of each.
  const std::vector<std::vector<int64_t>> axis_sets = {{0, 2}, {1, 3}, {0, 1, 3}, {-1, -3}};
  for (DType dt : {kFloat32, kFloat16, kInt64}) {
    INFO(dtype_name(dt));
    const Tensor x = random::uniform({3, 4, 5, 6}, 6, -4.0, 4.0).cast(dt);
    for (size_t s = 0; s < axis_sets.size(); ++s) {
      const std::vector<int64_t>& axes = axis_sets[s];
      const bool keep = s % 2 == 1;
      {
        INFO("axes " << axes[0] << "," << axes[1] << (axes.size() > 2 ? ",..." : "") << " keepdims " << keep);
        CHECK(differs(x, [&](const Tensor& t) { return sum(t, axes, keep); }, dt) == "");
        CHECK(differs(x, [&](const Tensor& t) { return min(t, axes, keep); }, dt) == "");
        // A permuted view, a step-2 slice and an expanded axis of extent 1.
        CHECK(differs(x, [&](const Tensor& t) { return max(permute(t, {2, 0, 3, 1}), axes, keep); }, dt) == "");
        CHECK(differs(x, [&](const Tensor& t) { return sum(slice(t, 3, 0, 6, 2), axes, keep); }, dt) == "");
        if (is_floating(dt)) {
          CHECK(differs(x, [&](const Tensor& t) { return logsumexp(t, axes, keep); }, dt) == "");
        }
      }
    }
    CHECK(differs(x, [&](const Tensor& t) { return sum(expand_dims(t, 2), std::vector<int64_t>{1, 2, 3}); }, dt) ==
          "");
    CHECK(differs(x, [&](const Tensor& t) { return argmax(permute(t, {3, 1, 0, 2}), 2, true); }, dt) == "");
    CHECK(differs(x, [&](const Tensor& t) { return argmin(t, 1); }, dt) == "");
  }
}

TEST_CASE("emulated CUDA: empty reductions and integer sums", "[cuda-emulation]") {
  for (DType dt : kNumeric) {
    INFO(dtype_name(dt));
    const Tensor e = zeros({3, 0}, dt);
    CHECK(differs(e, [](const Tensor& t) { return sum(t, std::vector<int64_t>{1}); }, dt) == "");
    CHECK(differs(e, [](const Tensor& t) { return prod(t, std::vector<int64_t>{1}, true); }, dt) == "");
    CHECK(differs(e, [](const Tensor& t) { return sum(t, std::vector<int64_t>{0}); }, dt) == "");
    CHECK(differs(e, [](const Tensor& t) { return cumsum(t, 1); }, dt) == "");
  }
  // int64 sums are exact; int32 sums accumulate in int64 and wrap when stored, as on the CPU.
  const Tensor big = Tensor::from_vector<int64_t>({int64_t(1) << 53, 1, 1, 1, -(int64_t(1) << 52), 3}, {6});
  CHECK(on_cpu(sum(on_dev(big))).item<int64_t>() == (int64_t(1) << 52) + 6);
  const Tensor i32 = Tensor::from_vector<int32_t>({2147483647, 1, 5}, {3});
  CHECK(on_cpu(sum(on_dev(i32))).item<int32_t>() == sum(i32).item<int32_t>());
  CHECK(on_cpu(cumsum(on_dev(big), 0, true, true)).to_vector<int64_t>() ==
        cumsum(big, 0, true, true).to_vector<int64_t>());
}

TEST_CASE("emulated CUDA: argmax and argmin take the first extreme, and the first NaN", "[cuda-emulation]") {
  const Tensor x = Tensor::from_vector<double>({1, 3, 3, 2, kNaN, 1, kNaN, 5, 2, kNaN, 7, 7}, {3, 4});
  for (DType dt : kFloats) {
    INFO(dtype_name(dt));
    const Tensor xd = on_dev(x.cast(dt));
    CHECK(on_cpu(argmax(xd, 1)).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
    CHECK(on_cpu(argmin(xd, 1)).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1});
    CHECK(on_cpu(argmax(xd, 0)).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 1, 2});
    CHECK(on_cpu(argmin(xd, 0)).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 1, 0});
    for (int64_t axis : {0, 1}) {
      CHECK(mismatch(on_cpu(argmax(xd, axis)), argmax(x.cast(dt), axis), Tolerance{}) == "");
      CHECK(mismatch(on_cpu(argmin(xd, axis)), argmin(x.cast(dt), axis), Tolerance{}) == "");
    }
    // Max and min propagate NaN.
    CHECK(mismatch(on_cpu(max(xd, std::vector<int64_t>{1})), max(x.cast(dt), std::vector<int64_t>{1}), Tolerance{}) ==
          "");
    CHECK(mismatch(on_cpu(min(xd, std::vector<int64_t>{0})), min(x.cast(dt), std::vector<int64_t>{0}), Tolerance{}) ==
          "");
    // 700 elements in 4 splits: ties and NaN found in different splits.
    std::vector<double> v(700, 1.0);
    v[100] = v[650] = 4.0;
    v[200] = v[690] = -3.0;
    const Tensor ties = Tensor::from_vector<double>(v, {700}).cast(dt);
    CHECK(on_cpu(argmax(on_dev(ties), 0)).item<int64_t>() == 100);
    CHECK(on_cpu(argmin(on_dev(ties), 0)).item<int64_t>() == 200);
    v[600] = v[500] = kNaN;
    const Tensor nans = Tensor::from_vector<double>(v, {700}).cast(dt);
    CHECK(on_cpu(argmax(on_dev(nans), 0)).item<int64_t>() == 500);
    CHECK(on_cpu(argmin(on_dev(nans), 0)).item<int64_t>() == 500);
    CHECK(std::isnan(on_cpu(max(on_dev(nans))).item<double>()));
    CHECK(on_cpu(argmax(on_dev(full({7}, 2.0, dt)), 0)).item<int64_t>() == 0);
  }
  for (DType dt : {kInt32, kInt64, kBool}) {
    INFO(dtype_name(dt));
    const Tensor t = Tensor::from_vector<int64_t>({0, 1, 1, 0, 1, 0, 0, 1, 1}, {3, 3}).cast(dt);
    for (int64_t axis : {0, 1}) {
      CHECK(mismatch(on_cpu(argmax(on_dev(t), axis)), argmax(t, axis), Tolerance{}) == "");
      CHECK(mismatch(on_cpu(argmin(on_dev(t), axis)), argmin(t, axis), Tolerance{}) == "");
    }
  }
}

TEST_CASE("emulated CUDA: cumsum by lines and by block-wide scans", "[cuda-emulation]") {
  for (size_t i = 0; i < kNumeric.size(); ++i) {
    const DType dt = kNumeric[i];
    INFO(dtype_name(dt));
    const Tensor x = is_floating(dt) ? random::uniform({3, 300}, 7, -1.0, 2.0).cast(dt)
                                     : random::uniform({3, 300}, 7, -50.0, 50.0).cast(kInt32).cast(dt);
    // Every (exclusive, reverse) pair in float32 and int64; one pair per other dtype.
    for (int pair = 0; pair < 4; ++pair) {
      if (dt != kFloat32 && dt != kInt64 && pair != int(i % 4)) continue;
      const bool exclusive = pair & 1, reverse = pair & 2;
      INFO("exclusive " << exclusive << " reverse " << reverse);
      CHECK(differs(x, [&](const Tensor& t) { return cumsum(t, 1, exclusive, reverse); }, dt) == "");  // scans
      CHECK(differs(x, [&](const Tensor& t) { return cumsum(t, 0, exclusive, reverse); }, dt) == "");  // lines
      CHECK(differs(x, [&](const Tensor& t) { return cumsum(transpose(t, {1, 0}), 0, exclusive, reverse); }, dt) ==
            "");
    }
  }
}

TEST_CASE("emulated CUDA: softmax, log-softmax and layer norm of long, short and odd rows", "[cuda-emulation]") {
  for (DType dt : kFloats) {
    INFO(dtype_name(dt));
    const Tensor x = random::uniform({3, 300}, 8, -6.0, 6.0).cast(dt);
    const Tensor many = random::uniform({37, 5}, 9, -6.0, 6.0).cast(dt);  // 8 rows per block, 2 blocks loop
    for (const Tensor& t : {x, many}) {
      if (t.dim(0) == 37 && (dt == kFloat64 || dt == kBFloat16)) continue;  // fewer launches
      INFO(shape_str(t.shape()));
      CHECK(differs(t, [](const Tensor& u) { return softmax(u, -1); }, dt) == "");
      CHECK(differs(t, [](const Tensor& u) { return log_softmax(u, 1); }, dt) == "");
      CHECK(differs(t, [](const Tensor& u) { return softmax(u, 0); }, dt) == "");  // a thread per line
      CHECK(differs(t, [](const Tensor& u) { return log_softmax(transpose(u, {1, 0}), 1); }, dt) == "");
      const int64_t d = t.dim(1);
      const Tensor g = random::uniform({d}, 10, 0.5, 1.5).cast(dt), b = random::uniform({d}, 11, -1.0, 1.0).cast(dt);
      CHECK(mismatch(on_cpu(layer_norm(on_dev(t), on_dev(g), on_dev(b), 1e-3)), layer_norm(t, g, b, 1e-3),
                     tol_for(dt)) == "");
    }
    // Large logits, -inf entries, an all -inf row and a row with a NaN.
    const Tensor special = Tensor::from_vector<double>(
        {1000, 999, -kInf, 998, -kInf, -kInf, -kInf, -kInf, 1, kNaN, 2, 3, -kInf, 0, 1, -kInf}, {4, 4}).cast(dt);
    for (int64_t axis : {0, 1}) {
      CHECK(differs(special, [&](const Tensor& u) { return softmax(u, axis); }, dt) == "");
      CHECK(differs(special, [&](const Tensor& u) { return log_softmax(u, axis); }, dt) == "");
    }
  }
}

TEST_CASE("emulated CUDA: sparse softmax cross-entropy of long and many rows", "[cuda-emulation]") {
  for (DType dt : kFloats) {
    INFO(dtype_name(dt));
    const Tensor x = random::uniform({3, 300}, 12, -6.0, 6.0).cast(dt);
    const Tensor lx = Tensor::from_vector<int64_t>({299, 0, 150}, {3});
    CHECK(mismatch(on_cpu(sparse_softmax_cross_entropy(on_dev(x), on_dev(lx))), sparse_softmax_cross_entropy(x, lx),
                   tol_for(dt)) == "");
    const Tensor many = random::uniform({37, 5}, 13, -6.0, 6.0).cast(dt);
    const Tensor lm = random::uniform({37}, 14, 0.0, 5.0).cast(kInt32);
    CHECK(mismatch(on_cpu(sparse_softmax_cross_entropy(on_dev(many), on_dev(lm))),
                   sparse_softmax_cross_entropy(many, lm), tol_for(dt)) == "");
    // Strided logits and labels.
    const Tensor labels = Tensor::from_vector<int64_t>({1, 9, 0, 9, 4, 9, 2, 9, 3, 9}, {10});
    const Tensor xt = random::uniform({5, 5}, 15, -2.0, 2.0).cast(dt);
    auto strided = [](const Tensor& l, const Tensor& y) {
      return sparse_softmax_cross_entropy(transpose(l, {1, 0}), slice(y, 0, 0, 10, 2));
    };
    CHECK(mismatch(on_cpu(strided(on_dev(xt), on_dev(labels))), strided(xt, labels), tol_for(dt)) == "");
  }
}

TEST_CASE("emulated CUDA: an out-of-range label is raised at the next synchronisation, with the CPU's message",
          "[cuda-emulation]") {
  const Tensor logits = random::uniform({37, 5}, 16, -2.0, 2.0);
  const Tensor logits_d = on_dev(logits);
  for (DType lt : {kInt64, kInt32}) {
    INFO(dtype_name(lt));
    // Two bad labels, in rows the grid's second block handles (30) and its first (33): the
    // CPU names the first in order, and so must the device.
    std::vector<int64_t> v(37, 2);
    v[30] = 7;
    v[33] = -1;
    const Tensor labels = Tensor::from_vector<int64_t>(v, {37}).cast(lt);
    const std::string want = cpu_error([&] { (void)sparse_softmax_cross_entropy(logits, labels); });
    REQUIRE(want == "sparse_softmax_cross_entropy: label 7 at position 30 is out of range [0, 5)");
    Tensor got;
    REQUIRE_NOTHROW(got = sparse_softmax_cross_entropy(logits_d, on_dev(labels)));  // not at the call
    CHECK(deferred_error() == want);
    CHECK(deferred_error().empty());  // raised once, then cleared
    // The rows with good labels have their loss; the bad ones NaN.
    const std::vector<double> loss = on_cpu(got).to_vector<double>();
    std::vector<int64_t> fixed = v;
    fixed[30] = fixed[33] = 0;
    const std::vector<double> want_loss =
        sparse_softmax_cross_entropy(logits, Tensor::from_vector<int64_t>(fixed, {37})).to_vector<double>();
    for (size_t i = 0; i < loss.size(); ++i) {
      INFO("row " << i);
      if (i == 30 || i == 33) {
        CHECK(std::isnan(loss[i]));
      } else {
        CHECK(std::abs(loss[i] - want_loss[i]) <= 1e-5 * (1 + std::abs(want_loss[i])));
      }
    }
  }
  // A host read raises it too.
  const Tensor bad = sparse_softmax_cross_entropy(on_dev(logits.slice(0, 0, 2)),
                                                  on_dev(Tensor::from_vector<int64_t>({5, 0}, {2})));
  CHECK_THROWS_WITH(bad.to_vector<float>(),
                    "sparse_softmax_cross_entropy: label 5 at position 0 is out of range [0, 5)");
  CHECK(deferred_error().empty());
}
