// Tensor handles, creation functions, views sharing storage, devices, the allocator and
// printing.
#include <set>
#include <sstream>

#include <strata/core/allocator.h>
#include <strata/core/device.h>
#include "tests/core/core_test_helpers.h"

using namespace strata;
using strata::testing::identical;
using Catch::Matchers::Contains;

TEST_CASE("tensor: creation functions fill shape, dtype and values", "[tensor]") {
  SECTION("zeros / ones / full") {
    Tensor z = zeros({2, 3});
    CHECK(z.shape() == Shape{2, 3});
    CHECK(z.dtype() == kFloat32);
    CHECK(z.to_vector<float>() == std::vector<float>(6, 0.0f));
    CHECK(ones({4}, kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1, 1});
    CHECK(full({2}, 2.5, kFloat64).to_vector<double>() == std::vector<double>{2.5, 2.5});
    CHECK(full({3}, -1.0, kBool).to_vector<bool>() == std::vector<bool>{true, true, true});
    CHECK(full({1}, 65536.0, kFloat16).item<float>() == INFINITY);  // out of float16's range
    Tensor like = full_like(ones({2, 2}, kInt32), 7);
    CHECK(like.dtype() == kInt32);
    CHECK(like.to_vector<int>() == std::vector<int>{7, 7, 7, 7});
    CHECK(zeros_like(like).to_vector<int>() == std::vector<int>{0, 0, 0, 0});
    CHECK(ones_like(like).to_vector<int>() == std::vector<int>{1, 1, 1, 1});
  }
  SECTION("arange follows Python's range, including negative steps and empty ranges") {
    CHECK(arange(0, 5).to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4});
    CHECK(arange(1, 2, 0.25).to_vector<float>() == std::vector<float>{1, 1.25, 1.5, 1.75});
    CHECK(arange(5, 0, -2, kInt64).to_vector<int64_t>() == std::vector<int64_t>{5, 3, 1});
    CHECK(arange(3, 3).shape() == Shape{0});
    CHECK(arange(3, 0).shape() == Shape{0});
    REQUIRE_THROWS_WITH(arange(0, 1, 0), Contains("arange: step must be non-zero"));
  }
  SECTION("linspace includes both ends") {
    CHECK(linspace(0, 1, 5, kFloat64).to_vector<double>() ==
          std::vector<double>{0, 0.25, 0.5, 0.75, 1});
    CHECK(linspace(2, 3, 1).to_vector<float>() == std::vector<float>{2});
    CHECK(linspace(2, 3, 0).shape() == Shape{0});
    REQUIRE_THROWS_WITH(linspace(0, 1, -1), Contains("linspace: num must be >= 0, got -1"));
  }
  SECTION("eye") {
    CHECK(eye(3).to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1});
    CHECK(eye(0).shape() == Shape{0, 0});
  }
  SECTION("literals") {
    Tensor t = tensor({{1, 2, 3}, {4, 5, 6}});
    CHECK(t.shape() == Shape{2, 3});
    CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
    REQUIRE_THROWS_WITH(tensor({{1, 2}, {3}}), Contains("tensor: ragged rows"));
  }
  SECTION("from_vector casts to the requested dtype and checks the element count") {
    Tensor t = Tensor::from_vector(std::vector<double>{1.5, -2.5, 3.0}, {3}, kInt32);
    CHECK(t.dtype() == kInt32);
    CHECK(t.to_vector<int>() == std::vector<int>{1, -2, 3});  // truncation, like a C cast
    Tensor b = Tensor::from_vector(std::vector<bool>{true, false}, {2});
    CHECK(b.dtype() == kBool);
    CHECK(b.to_vector<float>() == std::vector<float>{1, 0});
    REQUIRE_THROWS_WITH(Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2}),
                        Contains("from_vector: 3 values do not fill shape [2,2] (4 elements)"));
  }
}

TEST_CASE("tensor: metadata, item, data and rank-0 scalars", "[tensor]") {
  Tensor t = zeros({2, 3, 4});
  CHECK(t.ndim() == 3);
  CHECK(t.numel() == 24);
  CHECK(t.dim(-1) == 4);
  CHECK(t.dim(0) == 2);
  CHECK(t.strides() == Strides{12, 4, 1});
  CHECK(t.itemsize() == 4);
  CHECK(t.nbytes() == 96);
  CHECK(t.is_contiguous());
  CHECK(t.defined());
  CHECK_FALSE(Tensor().defined());
  REQUIRE_THROWS_WITH(t.dim(3), Contains("Tensor::dim: axis 3 is out of range for rank 3"));
  REQUIRE_THROWS_WITH(t.data<double>(),
                      Contains("Tensor::data: tensor has dtype float32, requested float64"));
  REQUIRE_THROWS_WITH(t.item<float>(),
                      Contains("item: expected a tensor with one element, got shape [2,3,4]"));

  Tensor s = Tensor::scalar(3.5);
  CHECK(s.ndim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.shape().empty());
  CHECK(s.strides().empty());
  CHECK(s.is_contiguous());
  CHECK(s.item<float>() == 3.5f);
  CHECK(Tensor::scalar(7, kInt64).item<int64_t>() == 7);
  // Rank-0 tensors go through ops like any other.
  CHECK((s * s).item<float>() == 12.25f);
  CHECK(sum(s).item<float>() == 3.5f);
  CHECK((s + ones({2})).to_vector<float>() == std::vector<float>{4.5f, 4.5f});
  CHECK(s.reshape({1, 1}).shape() == Shape{1, 1});
  CHECK(ones({1, 1}).reshape({}).ndim() == 0);
  CHECK(ones({1}).squeeze().ndim() == 0);
  CHECK(s.expand_dims(0).shape() == Shape{1});
}

TEST_CASE("tensor: every tensor has a distinct id, copies alias", "[tensor]") {
  Tensor a = zeros({2});
  Tensor b = zeros({2});
  Tensor alias = a;
  CHECK(a.id() != b.id());
  CHECK(alias.id() == a.id());
  CHECK(alias.impl_ptr() == a.impl_ptr());
  Tensor v = a.reshape({1, 2});
  CHECK(v.id() != a.id());  // a view is a new tensor over the same storage
  CHECK(v.shares_storage(a));
}

TEST_CASE("tensor: zero-size tensors", "[tensor]") {
  Tensor e = zeros({0, 3});
  CHECK(e.numel() == 0);
  CHECK(e.nbytes() == 0);
  CHECK(e.to_vector<float>().empty());
  CHECK(e.is_contiguous());
  CHECK(e.clone().shape() == Shape{0, 3});
  CHECK(e.reshape({3, 0}).shape() == Shape{3, 0});
  CHECK(e.reshape({-1, 3}).shape() == Shape{0, 3});
  CHECK(e.transpose().shape() == Shape{3, 0});
  CHECK(e.transpose().contiguous().shape() == Shape{3, 0});
  CHECK(e.cast(kInt64).dtype() == kInt64);
  CHECK(e.str() == "tensor([], shape=[0,3], dtype=float32)");
}

TEST_CASE("tensor: views share storage, writes through a view are visible", "[tensor][views]") {
  Tensor base = arange(0, 12).reshape({3, 4});
  SECTION("reshape of contiguous data") {
    Tensor r = base.reshape({4, 3});
    CHECK(r.shares_storage(base));
    r.slice(0, 0, 1).copy_(full({1, 3}, -1.0));
    CHECK(base.to_vector<float>()[0] == -1);
    CHECK(base.to_vector<float>()[2] == -1);
    CHECK(base.to_vector<float>()[3] == 3);
  }
  SECTION("transpose") {
    Tensor t = base.transpose();
    CHECK(t.shares_storage(base));
    CHECK_FALSE(t.is_contiguous());
    CHECK(t.shape() == Shape{4, 3});
    CHECK(t.strides() == Strides{1, 4});
    CHECK(t.to_vector<float>() == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
    t.slice(0, 1, 2).copy_(full({1, 3}, 100.0));  // row 1 of t = column 1 of base
    CHECK(base.to_vector<float>()[1] == 100);
    CHECK(base.to_vector<float>()[5] == 100);
  }
  SECTION("permute with negative axes") {
    Tensor x = arange(0, 24).reshape({2, 3, 4});
    Tensor p = x.permute({-1, 0, 1});
    CHECK(p.shape() == Shape{4, 2, 3});
    CHECK(p.shares_storage(x));
    CHECK(p.contiguous().to_vector<float>()[1] == 4);  // p[0,0,1] = x[0,1,0]
    CHECK(x.transpose(0, -1).shape() == Shape{4, 3, 2});
  }
  SECTION("slice with steps and negative bounds") {
    Tensor s = base.slice(1, 1, 4, 2);
    CHECK(s.shares_storage(base));
    CHECK(s.shape() == Shape{3, 2});
    CHECK(s.offset() == 1);
    CHECK(s.to_vector<float>() == std::vector<float>{1, 3, 5, 7, 9, 11});
    CHECK(base.slice(0, -2, 100).to_vector<float>() ==
          std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11});
    CHECK(base.slice(1, 3, 1).shape() == Shape{3, 0});  // empty, not an error
    s.copy_(zeros({3, 2}));
    CHECK(base.to_vector<float>() == std::vector<float>{0, 0, 2, 0, 4, 0, 6, 0, 8, 0, 10, 0});
  }
  SECTION("broadcast_to / expand_dims / squeeze") {
    Tensor row = arange(0, 4);
    Tensor b = row.broadcast_to({3, 4});
    CHECK(b.shares_storage(row));
    CHECK(b.strides() == Strides{0, 1});
    CHECK(b.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
    Tensor e = row.expand_dims(0);
    CHECK(e.shape() == Shape{1, 4});
    CHECK(e.shares_storage(row));
    CHECK(e.squeeze(0).shape() == Shape{4});
    CHECK(e.squeeze(0).shares_storage(row));
    CHECK(row.expand_dims(-1).shape() == Shape{4, 1});
  }
  SECTION("reshape of a non-contiguous view copies") {
    Tensor t = base.transpose();
    Tensor r = t.reshape({12});
    CHECK_FALSE(r.shares_storage(base));
    CHECK(r.to_vector<float>() == t.to_vector<float>());
  }
  SECTION("contiguous() is the tensor itself when already contiguous; clone() always copies") {
    CHECK(base.contiguous().impl_ptr() == base.impl_ptr());
    Tensor c = base.clone();
    CHECK_FALSE(c.shares_storage(base));
    CHECK(identical(c, base));
    Tensor tc = base.transpose().contiguous();
    CHECK(tc.is_contiguous());
    CHECK_FALSE(tc.shares_storage(base));
  }
  SECTION("copy_ broadcasts and casts") {
    Tensor dst = zeros({2, 3}, kFloat64);
    dst.copy_(tensor({1, 2, 3}));
    CHECK(dst.to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3});
    dst.copy_(Tensor::scalar(4, kInt32));
    CHECK(dst.to_vector<double>() == std::vector<double>(6, 4.0));
    REQUIRE_THROWS_WITH(dst.copy_(ones({4})), Contains("broadcast_to: cannot broadcast [4] to [2,3]"));
  }
  SECTION("copy_ from overlapping memory reads the values before the write") {
    Tensor m = arange(0, 9).reshape({3, 3});
    m.copy_(m.transpose());
    CHECK(m.to_vector<float>() == std::vector<float>{0, 3, 6, 1, 4, 7, 2, 5, 8});
    Tensor v = arange(0, 6);
    v.slice(0, 1, 6).copy_(v.slice(0, 0, 5));  // a shift within one buffer
    CHECK(v.to_vector<float>() == std::vector<float>{0, 0, 1, 2, 3, 4});
  }
  SECTION("copy_ refuses to write into a broadcast view") {
    Tensor row = zeros({3});
    REQUIRE_THROWS_WITH(row.broadcast_to({2, 3}).copy_(ones({2, 3})),
                        Contains("copy_: cannot write into [2,3]: it is a broadcast view whose elements share memory"));
    row.broadcast_to({1, 3}).copy_(ones({1, 3}));  // extent-1 axes are fine
    CHECK(row.to_vector<float>() == std::vector<float>{1, 1, 1});
  }
}

TEST_CASE("tensor: devices", "[tensor][device]") {
  CHECK(Device::parse("cpu") == cpu(0));
  CHECK(Device::parse("cpu:3") == cpu(3));
  CHECK(Device::parse("cuda:1") == cuda(1));
  CHECK(Device::parse("gpu:0") == cuda(0));
  CHECK(cpu(2).str() == "cpu:2");
  CHECK(same_memory(cpu(0), cpu(5)));
  CHECK_FALSE(same_memory(cuda(0), cuda(1)));
  REQUIRE_THROWS_WITH(Device::parse("tpu:0"), Contains("device: unknown device 'tpu:0'"));
  REQUIRE_THROWS_WITH(Device::parse("cpu:x"), Contains("device: bad device index in 'cpu:x'"));
  REQUIRE_THROWS_WITH(Device::parse("cpu:-1"), Contains("bad device index"));

  Tensor a = arange(0, 4);
  Tensor b = a.to(cpu(1));
  CHECK(b.device() == cpu(1));
  CHECK_FALSE(b.shares_storage(a));  // replicas never alias each other's values
  CHECK(b.to_vector<float>() == a.to_vector<float>());
  CHECK(a.to(cpu(0)).impl_ptr() == a.impl_ptr());
  // A transposed view moves as its logical values.
  CHECK(a.reshape({2, 2}).transpose().to(cpu(1)).to_vector<float>() ==
        std::vector<float>{0, 2, 1, 3});
  CHECK((b + b).device() == cpu(1));
  CHECK(zeros({2}, kFloat32, cpu(2)).device() == cpu(2));
  CHECK(Tensor::from_vector(std::vector<float>{1}, {1}, kFloat32, cpu(1)).device() == cpu(1));
  // Host scalars go anywhere; other mixes are errors.
  CHECK((b + Tensor::scalar(1)).device() == cpu(1));
}

TEST_CASE("tensor: the CPU allocator frees what tensors release", "[tensor][allocator]") {
  const AllocatorStats before = cpu_allocator_stats();
  {
    Tensor a = zeros({1000});
    Tensor b = (a + 1.0) * a;
    Tensor c = matmul(ones({8, 8}), ones({8, 8})).transpose().contiguous();
    const AllocatorStats during = cpu_allocator_stats();
    CHECK(during.live_bytes >= before.live_bytes + 8000);
    CHECK(during.allocations > before.allocations);
    CHECK(during.peak_bytes >= during.live_bytes);
  }
  CHECK(cpu_allocator_stats().live_bytes == before.live_bytes);
  // Memory is 64-byte aligned.
  for (int n : {1, 3, 17, 1000}) {
    Tensor t = zeros({n}, kInt64);
    CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
  }
  REQUIRE_THROWS_WITH(Tensor::empty({2, -1}), Contains("empty: negative extent in shape [2,-1]"));
}

TEST_CASE("tensor: large blocks are reused instead of mapped afresh", "[tensor][allocator]") {
  cpu_allocator_release_cached();
  const int64_t live = cpu_allocator_stats().live_bytes;
  void* first = nullptr;
  {
    Tensor big = Tensor::empty({1 << 21});  // 8 MiB: above glibc's mmap threshold
    first = big.raw_data();
    CHECK(cpu_allocator_stats().live_bytes == live + (int64_t(1) << 23));
  }
  CHECK(cpu_allocator_stats().live_bytes == live);  // a cached block is not live
  {
    Tensor again = Tensor::empty({1 << 21});
    CHECK(again.raw_data() == first);
    Tensor other = Tensor::empty({(1 << 21) + 1000});  // another size class: a new block
    CHECK(other.raw_data() != first);
    CHECK(reinterpret_cast<uintptr_t>(other.raw_data()) % 64 == 0);
    // Reused memory holds stale values, like any empty(); ops overwrite every element.
    Tensor filled = full({1 << 21}, 3.0);
    CHECK(filled.to_vector<float>()[(1 << 21) - 1] == 3.0f);
  }
  cpu_allocator_release_cached();
  CHECK(cpu_allocator_stats().live_bytes == live);
  // Many large tensors alive at once still get distinct blocks.
  std::vector<Tensor> many;
  std::set<void*> ptrs;
  for (int i = 0; i < 8; ++i) {
    many.push_back(ones({1 << 19}));
    ptrs.insert(many.back().raw_data());
  }
  CHECK(ptrs.size() == 8);
  for (const Tensor& t : many) CHECK(t.to_vector<float>()[12345] == 1.0f);
}

TEST_CASE("tensor: a small layer's few-KiB outputs reuse the block just freed", "[tensor][allocator]") {
  // 5 KiB and 32 KiB: the MNIST CNN's dense2 weight gradient and input gradient, and the
  // edges of the 1 KiB classes (4 KiB + 4 bytes rounds to 5 KiB; 63 KiB is the last class).
  for (int64_t floats : {int64_t(128 * 10), int64_t(64 * 128), int64_t(1025), int64_t(63 * 256)}) {
    INFO(floats << " floats");
    const int64_t live = cpu_allocator_stats().live_bytes;
    [[maybe_unused]] void* last = nullptr;  // compared only without sanitizers
    {
      // Three blocks freed in order: glibc would coalesce neighbours and hand out the
      // first address again; the thread's list hands out the last one freed (likeliest
      // still in the cache).
      std::vector<Tensor> three{full({floats}, 1.0), full({floats}, 1.0), full({floats}, 1.0)};
      for (const Tensor& t : three) CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
      CHECK(cpu_allocator_stats().live_bytes == live + 3 * floats * 4);
      last = three[2].raw_data();
      for (Tensor& t : three) t = Tensor();
    }
    CHECK(cpu_allocator_stats().live_bytes == live);
    Tensor again = full({floats}, 2.0);
    Tensor second = full({floats}, 3.0);
    CHECK(second.raw_data() != again.raw_data());
    CHECK(again.to_vector<float>().back() == 2.0f);
    CHECK(second.to_vector<float>().back() == 3.0f);
#ifndef STRATA_SANITIZER_BUILD  // sanitizer builds free every block, to catch use after free
    CHECK(again.raw_data() == last);
#endif
  }
}

TEST_CASE("tensor: medium blocks of a training step are reused, within a bound", "[tensor][allocator]") {
  cpu_allocator_release_cached();
  const AllocatorStats start = cpu_allocator_stats();
  void* first = nullptr;
  {
    Tensor act = Tensor::empty({128, 512});  // 256 KiB: an MLP activation
    first = act.raw_data();
    CHECK(cpu_allocator_stats().live_bytes == start.live_bytes + 128 * 512 * 4);
  }
  CHECK(cpu_allocator_stats().live_bytes == start.live_bytes);  // cached, not live
  {
    Tensor again = Tensor::empty({128, 512});
    CHECK(again.raw_data() == first);
    // The same 4 KiB size class (256 KiB + 1 KiB rounds up to 260 KiB): a new block, as the
    // cached one is taken.
    Tensor near = Tensor::empty({128 * 512 + 256});
    CHECK(near.raw_data() != first);
    CHECK(reinterpret_cast<uintptr_t>(near.raw_data()) % 64 == 0);
    CHECK(cpu_allocator_stats().live_bytes == start.live_bytes + (128 * 512 * 2 + 256) * 4);
    CHECK(cpu_allocator_stats().peak_bytes >= cpu_allocator_stats().live_bytes);
  }
  {
    // Just below the cached range (64 KiB - 64 bytes) and just at it: both usable.
    Tensor below = full({(1 << 14) - 16}, 2.0);
    Tensor at = full({1 << 14}, 3.0);
    CHECK(below.to_vector<float>().back() == 2.0f);
    CHECK(at.to_vector<float>().back() == 3.0f);
  }
  // More medium blocks than the 64 MiB bound alive at once, then freed: the cache keeps at
  // most the bound, the rest go back to malloc; every block is still distinct while alive.
  {
    std::vector<Tensor> many;
    std::set<void*> ptrs;
    for (int i = 0; i < 300; ++i) {  // 300 x 512 KiB = 150 MiB
      many.push_back(full({1 << 17}, double(i)));
      ptrs.insert(many.back().raw_data());
    }
    CHECK(ptrs.size() == 300);
    for (int i = 0; i < 300; i += 37) CHECK(many[size_t(i)].to_vector<float>()[777] == float(i));
    CHECK(cpu_allocator_stats().live_bytes == start.live_bytes + int64_t(300) * (1 << 19));
  }
  constexpr int64_t kBound = int64_t(64) << 20;
  const AllocatorStats freed = cpu_allocator_stats();
  CHECK(freed.live_bytes == start.live_bytes);
  CHECK(freed.cached_bytes <= kBound);
  CHECK(freed.cached_bytes > kBound - 2 * (1 << 19));
  {
    // The cached 512 KiB blocks come back (the cache empties of them), the rest from malloc.
    std::vector<Tensor> again;
    for (int i = 0; i < 200; ++i) again.push_back(Tensor::empty({1 << 17}));
    CHECK(cpu_allocator_stats().live_bytes == start.live_bytes + int64_t(200) * (1 << 19));
    CHECK(cpu_allocator_stats().cached_bytes < (1 << 20));
  }
  cpu_allocator_release_cached();
  CHECK(cpu_allocator_stats().live_bytes == start.live_bytes);
  CHECK(cpu_allocator_stats().cached_bytes == 0);
}

TEST_CASE("tensor: printing is NumPy-like", "[tensor][print]") {
  CHECK(tensor({1, 2.5f, -3}).str() == "tensor([1, 2.5, -3], shape=[3], dtype=float32)");
  CHECK(tensor({{1, 2}, {3, 4}}).str() ==
        "tensor([[1, 2],\n        [3, 4]], shape=[2,2], dtype=float32)");
  CHECK(arange(0, 3, 1, kInt64).str() == "tensor([0, 1, 2], shape=[3], dtype=int64)");
  CHECK(Tensor::scalar(2.5).str() == "tensor(2.5, shape=[], dtype=float32)");
  CHECK(Tensor::scalar(-4, kInt32).str() == "tensor(-4, shape=[], dtype=int32)");
  CHECK(Tensor::from_vector(std::vector<bool>{true, false}).str() ==
        "tensor([True, False], shape=[2], dtype=bool)");
  CHECK(Tensor::from_vector(std::vector<float>{NAN, INFINITY, -INFINITY}).str() ==
        "tensor([nan, inf, -inf], shape=[3], dtype=float32)");
  CHECK(Tensor().str() == "tensor(undefined)");
  CHECK(zeros({1}, kFloat32, cpu(1)).str() == "tensor([0], shape=[1], dtype=float32, device=cpu:1)");
  // A view prints its logical values.
  CHECK(arange(0, 4).reshape({2, 2}).transpose().str() ==
        "tensor([[0, 2],\n        [1, 3]], shape=[2,2], dtype=float32)");
  // Three levels: inner rows separated by newlines and indented under their bracket.
  CHECK(arange(0, 8).reshape({2, 2, 2}).str() ==
        "tensor([[[0, 1],\n         [2, 3]],\n        [[4, 5],\n         [6, 7]]], shape=[2,2,2], "
        "dtype=float32)");

  SECTION("up to 1000 elements print in full; beyond, three items at each end of each axis") {
    const std::string full_str = arange(0, 1000).str();
    CHECK(full_str.find("...") == std::string::npos);
    CHECK(full_str.find(", 999]") != std::string::npos);
    const std::string s = arange(0, 1001).str();
    CHECK(s == "tensor([0, 1, 2, ..., 998, 999, 1000], shape=[1001], dtype=float32)");
    const std::string m = arange(0, 2000).reshape({40, 50}).str();
    CHECK(m.find("[[0, 1, 2, ..., 47, 48, 49],") == 7);
    CHECK(m.find("...,\n") != std::string::npos);  // rows are summarised too
    CHECK(m.find("[1950, 1951, 1952, ..., 1997, 1998, 1999]]") != std::string::npos);
    CHECK(m.find("[100, 101") != std::string::npos);  // rows 0-2 are present...
    CHECK(m.find("[150, 151") == std::string::npos);  // ...row 3 is not
  }
  SECTION("printing leaves the stream's formatting alone") {
    std::ostringstream os;
    os << tensor({1.0f / 3.0f});
    os << ' ' << 1.0 / 3.0;
    CHECK(os.str().substr(os.str().rfind(' ') + 1) == "0.333333");
    std::ostringstream os2;
    os2.precision(12);
    os2 << tensor({0.5f}) << ' ' << 1.0 / 3.0;
    CHECK(os2.str().substr(os2.str().rfind(' ') + 1) == "0.333333333333");
  }
}

TEST_CASE("tensor: undefined tensors raise errors instead of crashing", "[tensor][errors]") {
  Tensor u;
  REQUIRE_THROWS_WITH(u.shape(), Contains("Tensor: use of an undefined tensor"));
  REQUIRE_THROWS_WITH(neg(u), Contains("neg: undefined input tensor"));
  REQUIRE_THROWS_WITH(add(u, ones({1})), Contains("add: input 0 is an undefined tensor"));
  REQUIRE_THROWS_WITH(matmul(ones({1, 1}), u), Contains("matmul: input 1 is an undefined tensor"));
  REQUIRE_THROWS_AS(sum(u), Error);
}
