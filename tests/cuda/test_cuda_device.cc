// The CUDA backend on a real GPU (run by `ctest -L "^cuda$"` on a lent machine; skipped
// without a device): the caching allocator, copies, streams, parity of every ported
// kernel with the CPU, bitwise-equal random draws, deferred data errors, and the shape and
// optimizer kernels at sizes the emulator cannot run.
#include <catch2/catch.hpp>

#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include <strata/core/ops.h>
#include <strata/core/random.h>
#include <strata/core/stream.h>
#include <strata/kernels/cuda/runtime.h>
#include "tests/cuda/parity.h"

using namespace strata;
using strata::testing::mismatch;
using strata::testing::Tolerance;

namespace strata::cuda_testing {
void label_check(const Tensor& labels, int64_t limit, const Stream& stream);
}

namespace {
Tensor on_cpu(const Tensor& t) { return t.to(Device()); }
bool ported_family(OpId op) {
  const std::string f = cuda_testing::op_family(op);
  return f == "Unary" || f == "Binary" || f == "Creation" || f == "Random" || f == "Shape" ||
         f == "Optimizer" || f == "Reduce" || f == "NN";
}
}  // namespace

TEST_CASE("cuda: device properties and streams", "[cuda]") {
  CHECK(cuda_backend::device_count() >= 1);
  CHECK(cuda_backend::properties(0).total_memory > 0);
  const Stream d = current_stream(cuda(0));
  CHECK(d.is_default());
  CHECK(d.native_handle() != nullptr);
  const Stream s = create_stream(cuda(0));
  CHECK(s.id() != 0);
  CHECK_THROWS_WITH(zeros({1}, kFloat32, cuda(cuda_backend::device_count())), Catch::Contains("does not exist"));
}

TEST_CASE("cuda: the caching allocator reuses, counts and empties", "[cuda]") {
  cuda_backend::empty_cache();
  const auto s0 = cuda_backend::allocator_stats(0);
  {
    Tensor a = zeros({1024, 1024}, kFloat32, cuda(0));  // 4 MiB: a 20 MiB segment
    const auto s1 = cuda_backend::allocator_stats(0);
    CHECK(s1.allocated_bytes == s0.allocated_bytes + 4 * 1024 * 1024);
    CHECK(s1.reserved_bytes >= s0.reserved_bytes + 20 * 1024 * 1024);
  }
  const int64_t mallocs = cuda_backend::allocator_stats(0).device_mallocs;
  for (int i = 0; i < 20; ++i) (void)add(zeros({1024, 1024}, kFloat32, cuda(0)), Tensor::scalar(1.0));
  CHECK(cuda_backend::allocator_stats(0).device_mallocs == mallocs);
  cuda_backend::empty_cache();
  CHECK(cuda_backend::allocator_stats(0).reserved_bytes <= s0.reserved_bytes);
  // Out of memory: a clear error with the sizes, and the device still works afterwards.
  CHECK_THROWS_WITH(zeros({int64_t(1) << 50}, kFloat32, cuda(0)),
                    Catch::Contains("out of memory on cuda:0") && Catch::Contains("bytes requested"));
  CHECK(on_cpu(ones({3}, kFloat32, cuda(0))).to_vector<float>() == std::vector<float>(3, 1.0f));
}

TEST_CASE("cuda: copies round-trip in every dtype, strided and non-blocking", "[cuda]") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool}) {
    INFO(dtype_name(dt));
    const Tensor x = arange(-50, 70, 1, kFloat32).reshape({4, 5, 6}).cast(dt);
    const Tensor xs = x.permute({2, 0, 1}).slice(0, 1, 6, 2);
    for (bool nb : {false, true}) {
      const Tensor d = xs.to(cuda(0), nb);
      const Tensor dt2 = d.transpose(0, 2);
      const Tensor back = dt2.to(Device(), nb);
      synchronize(cuda(0));
      CHECK(mismatch(back, xs.transpose(0, 2).contiguous(), Tolerance{}).empty());
    }
    if (cuda_backend::device_count() > 1) {
      const Tensor d1 = x.to(cuda(0)).to(cuda(1));
      CHECK(mismatch(on_cpu(d1), x, Tolerance{}).empty());
    }
  }
  // A large non-blocking upload through pinned staging, then work on a side stream.
  const Tensor big = random::uniform({1 << 20}, 3);
  const Tensor dbig = big.to(cuda(0), /*non_blocking=*/true);
  const Stream side = create_stream(cuda(0));
  stream_wait(side, current_stream(cuda(0)));
  Tensor doubled;
  {
    StreamGuard g(side);
    doubled = add(dbig, dbig);
    dbig.storage()->record_stream(side);
  }
  synchronize(side);
  CHECK(mismatch(on_cpu(doubled), add(big, big), Tolerance{}).empty());
}

TEST_CASE("cuda: pinned host memory: asynchronous copies both ways, blocks held while a copy may use them",
          "[cuda]") {
  const Tensor x = random::uniform({1 << 22}, 11);  // 16 MiB
  const Tensor px = x.pin_memory();
  CHECK(px.is_pinned());
  CHECK_FALSE(x.is_pinned());
  const Tensor d = px.to(cuda(0), /*non_blocking=*/true);
  const Tensor back = d.to(Device(), /*non_blocking=*/true);
  CHECK(back.is_pinned());
  synchronize(cuda(0));
  CHECK(mismatch(back, x, Tolerance{}).empty());

  // Queue a few large products on the stream, so that the copies behind them wait, then
  // drop the host tensors those copies read and write and write fresh pinned tensors of
  // the same size at once: the allocator must not hand the blocks out before the copies
  // have finished, whichever way the timing goes.
  const Tensor a = random::uniform({4096, 4096}, 12).to(cuda(0));
  synchronize(cuda(0));
  Tensor slow = a;
  for (int i = 0; i < 4; ++i) slow = matmul(slow, a);
  Tensor up;
  {
    const Tensor src = x.pin_memory();
    up = src.to(cuda(0), /*non_blocking=*/true);
  }
  Tensor reused_src = full({1 << 22}, -1.0, kFloat32).pin_memory();  // written by the host now
  const Tensor down_src = add(up, up);
  {
    const Tensor dst = down_src.to(Device(), /*non_blocking=*/true);
    (void)dst;
  }
  const Tensor reused_dst = full({1 << 22}, -2.0, kFloat32).pin_memory();
  synchronize(cuda(0));
  CHECK(mismatch(on_cpu(up), x, Tolerance{}).empty());
  CHECK(reused_src.to_vector<float>() == std::vector<float>(size_t(1) << 22, -1.0f));
  CHECK(reused_dst.to_vector<float>() == std::vector<float>(size_t(1) << 22, -2.0f));
  (void)slow;
  const auto st = cuda_backend::host_allocator().stats();
  CHECK(st.lost_blocks == 0);
  cuda_backend::empty_cache();
}

TEST_CASE("cuda: every op-info sample of the ported families matches the CPU", "[cuda]") {
  const cuda_testing::ParityReport r = cuda_testing::run_parity(cuda(0), /*emulated=*/false, ported_family);
  std::cout << "[cuda parity] " << r.summary() << "\n";
  for (const std::string& f : r.failures) FAIL_CHECK(f);
  CHECK(r.no_kernel.empty());
  const cuda_testing::ParityReport rest =
      cuda_testing::run_parity(cuda(0), false, [](OpId op) { return !ported_family(op); });
  std::cout << "[cuda parity, other families] " << rest.summary() << "\n";
  for (const std::string& f : rest.failures) FAIL_CHECK(f);
}

TEST_CASE("cuda: uniform and bernoulli are bitwise equal to the CPU", "[cuda]") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    for (auto [lo, hi] : {std::pair{0.0, 1.0}, std::pair{-2.5, 7.0}, std::pair{0.999, 1.0}}) {
      const Tensor got = random::uniform({100000}, 42, lo, hi, dt, cuda(0));
      CHECK(mismatch(on_cpu(got), random::uniform({100000}, 42, lo, hi, dt), Tolerance{}).empty());
    }
    const Tensor b = random::bernoulli({100000}, 0.3, 7, dt, cuda(0));
    CHECK(mismatch(on_cpu(b), random::bernoulli({100000}, 0.3, 7, dt), Tolerance{}).empty());
  }
}

TEST_CASE("cuda: an out-of-range label is raised at the next synchronisation", "[cuda]") {
  const Tensor labels = Tensor::from_vector<int64_t>({1, 2, 7, 0, 9}, {5}).to(cuda(0));
  cuda_testing::label_check(labels, 5, current_stream(cuda(0)));
  try {
    synchronize(cuda(0));
    FAIL("no error raised");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("sparse_softmax_cross_entropy: label") == 0);
    CHECK(std::string(e.what()).find("is out of range [0, 5)") != std::string::npos);
  }
  CHECK_NOTHROW(synchronize(cuda(0)));
  cuda_testing::label_check(labels, 3, current_stream(cuda(0)));
  CHECK_THROWS_WITH(labels.to_vector<int64_t>(), Catch::Contains("is out of range [0, 3)"));
}

TEST_CASE("cuda: shape and optimizer kernels at sizes the emulator cannot run", "[cuda]") {
  // A bad gather index is raised at the next synchronisation, with the CPU's message.
  const Tensor table = random::uniform({1000, 64}, 1);
  const Tensor ids = Tensor::from_vector<int64_t>({3, 999, 1000, 5, -1}, {5});
  std::string want;
  try {
    (void)gather(table, ids, 0);
  } catch (const Error& e) {
    want = e.what();
  }
  (void)gather(table.to(cuda(0)), ids.to(cuda(0)), 0);
  CHECK_THROWS_WITH(synchronize(cuda(0)), want);
  CHECK_NOTHROW(synchronize(cuda(0)));
  // scatter_add with heavy contention: integer-valued float16/bfloat16 sums are exact in
  // any order; arbitrary values differ from the CPU's order by rounding only.
  const Tensor idx = random::uniform({100000}, 2, 0.0, 8.0).cast(kInt64);
  for (DType dt : {kFloat16, kBFloat16, kFloat32, kFloat64, kInt32, kInt64}) {
    INFO(dtype_name(dt));
    const Tensor u = random::uniform({100000, 4}, 3, 0.0, 2.0).cast(kInt32).cast(dt);
    const Tensor small = dt == kBFloat16 ? slice(u, 0, 0, 200) : u;  // bfloat16: integers <= 256
    const Tensor sidx = dt == kBFloat16 ? slice(idx, 0, 0, 200) : idx;
    CHECK(mismatch(on_cpu(scatter_add(small.to(cuda(0)), sidx.to(cuda(0)), {8, 4}, 0)),
                   scatter_add(small, sidx, {8, 4}, 0), Tolerance{})
              .empty());
  }
  const Tensor uf = random::uniform({100000, 4}, 4, -1.0, 1.0);
  CHECK(mismatch(on_cpu(scatter_add(uf.to(cuda(0)), idx.to(cuda(0)), {8, 4}, 0)), scatter_add(uf, idx, {8, 4}, 0),
                 Tolerance{1e-4, 1e-2})
            .empty());
  // all_finite: NaN in the last element of a large strided tensor.
  Tensor big = random::uniform({1000, 1001}, 5);
  CHECK(on_cpu(all_finite({big.to(cuda(0)).transpose(0, 1)})).item<bool>());
  std::vector<float> v = big.to_vector<float>();
  v.back() = std::numeric_limits<float>::quiet_NaN();
  big = Tensor::from_vector<float>(v, {1000, 1001});
  CHECK_FALSE(on_cpu(all_finite({ones({10}, kFloat16, cuda(0)), big.to(cuda(0)).transpose(0, 1)})).item<bool>());
  // SGD with Nesterov momentum and AdamW: bitwise equal to the CPU in every float dtype.
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    const Shape shape{1 << 20};
    Tensor p = random::uniform(shape, 6, -1.0, 1.0, dt), b = zeros(shape, dt), m = zeros(shape, dt), w = zeros(shape, dt);
    Tensor pa = p.clone();
    Tensor pd = p.to(cuda(0)), bd = b.to(cuda(0)), pad_ = pa.to(cuda(0)), md = m.to(cuda(0)), wd = w.to(cuda(0));
    for (int64_t step = 1; step <= 2; ++step) {
      const Tensor g = random::uniform(shape, uint64_t(10 + step), -2.0, 2.0, dt), gd = g.to(cuda(0));
      const SgdAttrs sgd{0.05, 0.8, 0.01, true};
      sgd_update(p, g, b, sgd);
      sgd_update(pd, gd, bd, sgd);
      const AdamAttrs adamw{1e-2, 0.9, 0.999, 1e-7, 0.1, /*decoupled=*/true, step};
      adam_update(pa, g, m, w, adamw);
      adam_update(pad_, gd, md, wd, adamw);
    }
    CHECK(mismatch(on_cpu(pd), p, Tolerance{}).empty());
    CHECK(mismatch(on_cpu(bd), b, Tolerance{}).empty());
    CHECK(mismatch(on_cpu(pad_), pa, Tolerance{}).empty());
    CHECK(mismatch(on_cpu(md), m, Tolerance{}).empty());
    CHECK(mismatch(on_cpu(wd), w, Tolerance{}).empty());
  }
}
