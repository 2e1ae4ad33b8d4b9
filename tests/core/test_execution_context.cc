// The execution context (core/stream.h): the per-thread current device and streams, where
// creation ops allocate, the stream kernels and allocators receive, registered copies,
// typed attributes and deferred data errors. An asynchronous backend is played by a fake
// "cuda" backend registered for one test (host memory underneath) and removed after it.
#include <map>
#include <mutex>
#include <thread>

#include <strata/core/allocator.h>
#include <strata/core/data_error.h>
#include <strata/core/dispatch.h>
#include <strata/core/random.h>
#include <strata/core/stream.h>
#include "tests/core/core_test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// A fake asynchronous backend for DeviceType::CUDA: host memory, streams that are only
// ids, a deferred data error that synchronize() raises, and a record of what the
// kernel, allocator and copies were handed.
struct FakeDevice final : StreamBackend, Allocator {
  std::mutex mutex;
  std::vector<Stream> alloc_streams, kernel_streams, copy_streams, recorded_streams, synced;
  std::vector<bool> copy_non_blocking;
  DataError pending;
  uint64_t next_stream = 1;

  int device_count() override { return 2; }
  Stream default_stream(int index) override { return Stream(cuda(index), 0); }
  Stream create_stream(int index) override { return Stream(cuda(index), next_stream++); }
  void synchronize(const Stream& s) override {
    synced.push_back(s);
    if (pending.any()) {
      const DataError e = pending;
      pending = DataError{};
      raise_data_error(e);
    }
  }
  void wait(const Stream&, const Stream&) override {}

  void* allocate(size_t bytes, Device, const Stream& s) override {
    alloc_streams.push_back(s);
    return std::malloc(bytes ? bytes : 1);
  }
  void deallocate(void* p, size_t, Device) override { std::free(p); }
  void record_stream(void*, Device, const Stream& s) override { recorded_streams.push_back(s); }
  AllocatorStats stats() const override { return {}; }
  void reset_peak() override {}
};

FakeDevice* g_fake = nullptr;

void fake_fill(const KernelArgs& k) {
  g_fake->kernel_streams.push_back(k.stream);
  float* p = static_cast<float*>(k.out[0].raw_data());
  for (int64_t i = 0; i < k.out[0].numel(); ++i) p[i] = float(k.attrs.get<FillAttrs>(k.op).value);
}

void fake_copy(const Tensor& src, const Tensor& dst, const Stream& s, bool non_blocking) {
  g_fake->copy_streams.push_back(s);
  g_fake->copy_non_blocking.push_back(non_blocking);
  const Tensor c = src.contiguous();
  std::memcpy(dst.raw_data(), c.raw_data(), c.nbytes());
}

// Installs the fake backend for one test and removes every registration after it.
struct FakeBackendScope {
  FakeDevice device;
  FakeBackendScope() {
    g_fake = &device;
    ensure_backends_registered();
    register_stream_backend(DeviceType::CUDA, &device);
    register_allocator(DeviceType::CUDA, &device);
    register_kernel(OpId::Fill, DeviceType::CUDA, fake_fill);
    register_copy(DeviceType::CPU, DeviceType::CUDA, fake_copy);
    register_copy(DeviceType::CUDA, DeviceType::CPU, fake_copy);
  }
  ~FakeBackendScope() {
    register_copy(DeviceType::CPU, DeviceType::CUDA, nullptr);
    register_copy(DeviceType::CUDA, DeviceType::CPU, nullptr);
    register_kernel(OpId::Fill, DeviceType::CUDA, nullptr);
    register_allocator(DeviceType::CUDA, nullptr);
    register_stream_backend(DeviceType::CUDA, nullptr);
    g_fake = nullptr;
  }
};

}  // namespace

TEST_CASE("execution context: the current device defaults to cpu:0 and DeviceGuard nests", "[core][stream]") {
  CHECK(current_device() == cpu(0));
  {
    DeviceGuard outer(cpu(1));
    CHECK(current_device() == cpu(1));
    {
      DeviceGuard inner(cpu(2));
      CHECK(current_device() == cpu(2));
    }
    CHECK(current_device() == cpu(1));
  }
  CHECK(current_device() == cpu(0));
  // Per thread: another thread still sees cpu:0.
  DeviceGuard here(cpu(3));
  Device seen;
  std::thread([&] { seen = current_device(); }).join();
  CHECK(seen == cpu(0));
}

TEST_CASE("execution context: creation and random ops allocate on the current device", "[core][stream]") {
  DeviceGuard on(cpu(1));
  CHECK(zeros({2}).device() == cpu(1));
  CHECK(full({2}, 3.0).device() == cpu(1));
  CHECK(arange(0, 4).device() == cpu(1));
  CHECK(linspace(0, 1, 3).device() == cpu(1));
  CHECK(eye(2).device() == cpu(1));
  CHECK(Tensor::empty({2}).device() == cpu(1));
  CHECK(Tensor::scalar(1.0).device() == cpu(1));
  CHECK(Tensor::from_vector(std::vector<float>{1, 2}).device() == cpu(1));
  CHECK(random::uniform({3}, 1).device() == cpu(1));
  CHECK(random::normal({3}, 1).device() == cpu(1));
  CHECK(random::bernoulli({3}, 0.5, 1).device() == cpu(1));
  // An explicit device still wins, and the values do not depend on the device.
  CHECK(zeros({2}, kFloat32, cpu(0)).device() == cpu(0));
  CHECK(random::uniform({5}, 7).to_vector<float>() == random::uniform({5}, 7, 0.0, 1.0, kFloat32, cpu(0)).to_vector<float>());
}

TEST_CASE("execution context: StreamGuard sets the current stream of one device and nests", "[core][stream]") {
  CHECK(current_stream(cpu(0)) == Stream::default_for(cpu(0)));
  CHECK(current_stream().is_default());
  const Stream a = create_stream(cpu(0)), b = create_stream(cpu(0)), c = create_stream(cpu(1));
  CHECK_FALSE(a == b);
  CHECK_FALSE(a.is_default());
  {
    StreamGuard ga(a);
    CHECK(current_stream(cpu(0)) == a);
    CHECK(current_stream(cpu(1)).is_default());  // other devices keep theirs
    {
      StreamGuard gc(c);
      StreamGuard gb(b);
      CHECK(current_stream(cpu(0)) == b);
      CHECK(current_stream(cpu(1)) == c);
    }
    CHECK(current_stream(cpu(0)) == a);
    CHECK(current_stream(cpu(1)).is_default());
    // Storage remembers the stream it was allocated for.
    CHECK(Tensor::empty({4}).storage()->stream() == a);
    synchronize(a);  // CPU streams are immediate: returns at once
  }
  CHECK(current_stream(cpu(0)).is_default());
}

TEST_CASE("execution context: kernels, allocators and copies of an asynchronous backend get the current stream", "[core][stream]") {
  FakeBackendScope fake;
  const Stream side = create_stream(cuda(1));
  CHECK(side.device() == cuda(1));
  Tensor x;
  {
    DeviceGuard on(cuda(1));
    StreamGuard s(side);
    x = full({3}, 2.5);  // the fake Fill kernel on cuda:1
  }
  CHECK(x.device() == cuda(1));
  REQUIRE(fake.device.kernel_streams.size() == 1);
  CHECK(fake.device.kernel_streams[0] == side);
  REQUIRE(fake.device.alloc_streams.size() == 1);
  CHECK(fake.device.alloc_streams[0] == side);
  CHECK(x.storage()->stream() == side);
  // record_stream reaches the allocator for another stream of the same device only.
  x.storage()->record_stream(Stream(cuda(1), 99));
  x.storage()->record_stream(side);
  REQUIRE(fake.device.recorded_streams.size() == 1);
  CHECK(fake.device.recorded_streams[0] == Stream(cuda(1), 99));
  REQUIRE_THROWS_WITH(x.storage()->record_stream(Stream(cuda(0), 1)),
                      StartsWith("Storage::record_stream: memory on cuda:1 cannot be used by a stream of cuda:0"));
  // The host cannot address it; a host read copies through the registered copy, on the
  // device side's current stream, blocking.
  REQUIRE_THROWS_WITH(x.data<float>(), Contains("cuda:1 tensor is not addressable from the host"));
  CHECK(x.to_vector<float>() == std::vector<float>{2.5f, 2.5f, 2.5f});
  REQUIRE(fake.device.copy_streams.size() == 1);
  CHECK(fake.device.copy_streams[0] == Stream(cuda(1), 0));
  CHECK_FALSE(fake.device.copy_non_blocking[0]);
  Tensor y = ones({2}).to(cuda(0), /*non_blocking=*/true);
  CHECK(y.device() == cuda(0));
  CHECK(fake.device.copy_non_blocking.back());
  // No kernel for an op on the fake device: a clear error naming the op and device.
  REQUIRE_THROWS_WITH(add(y, y), StartsWith("add: no kernel for device cuda:0"));
  // Inputs on another device are refused before any kernel runs; host scalars mix.
  REQUIRE_THROWS_WITH(add(y, ones({2})), Contains("add: inputs are on different devices: cuda:0 and cpu:0"));
}

TEST_CASE("execution context: a deferred data error is raised at the next synchronisation with the CPU's message", "[core][stream]") {
  // The CPU kernel raises at the call...
  std::string cpu_message;
  try {
    gather(zeros({5, 2}), Tensor::from_vector(std::vector<int64_t>{1, 7}), 0);
  } catch (const Error& e) {
    cpu_message = e.what();
  }
  const DataError index{DataErrorKind::IndexOutOfRange, OpId::Gather, 7, 1, 5, 0};
  CHECK(cpu_message == data_error_message(index));
  std::string xent_message;
  try {
    sparse_softmax_cross_entropy(zeros({3, 4}), Tensor::from_vector(std::vector<int64_t>{0, 1, 4}));
  } catch (const Error& e) {
    xent_message = e.what();
  }
  CHECK(xent_message ==
        data_error_message({DataErrorKind::LabelOutOfRange, OpId::SparseSoftmaxCrossEntropy, 4, 2, 4, 0}));
  CHECK_THAT(xent_message, StartsWith("sparse_softmax_cross_entropy: label 4 at position 2 is out of range [0, 4)"));
  // ...an asynchronous device records it and the next synchronisation raises it, once.
  FakeBackendScope fake;
  fake.device.pending = index;
  REQUIRE_THROWS_WITH(synchronize(cuda(0)), cpu_message);
  CHECK_NOTHROW(synchronize(cuda(0)));
  CHECK(fake.device.synced.size() == 2);
}

TEST_CASE("execution context: without a backend, cuda devices raise naming the device", "[core][stream]") {
  if (stream_backend(DeviceType::CUDA) != nullptr) return;  // a CUDA build with its backend linked
  REQUIRE_THROWS_WITH(current_stream(cuda(0)), Contains("no cuda backend for device cuda:0"));
  REQUIRE_THROWS_WITH(synchronize(Stream(cuda(0), 0)), Contains("no cuda backend"));
  CHECK_NOTHROW(current_device());
}

TEST_CASE("execution context: attributes of another op family are refused by name", "[core][stream]") {
  const OpAttrs gelu(GeluAttrs{true});
  CHECK(gelu.get<GeluAttrs>(OpId::Gelu).approximate_tanh);
  REQUIRE_THROWS_WITH(gelu.get<CumsumAttrs>(OpId::Cumsum),
                      StartsWith("cumsum: kernel expected its own attributes"));
  const OpAttrs none;
  REQUIRE_THROWS_WITH(none.get<FillAttrs>(OpId::Fill), StartsWith("fill:"));
}

TEST_CASE("execution context: the host backend registers first and copies between logical CPU devices", "[core][stream]") {
  const auto names = registered_backends();
  REQUIRE_FALSE(names.empty());
  CHECK(names[0] == "cpu");
  REQUIRE(find_copy(DeviceType::CPU, DeviceType::CPU) != nullptr);
  Tensor x = arange(0, 6).reshape({2, 3}).transpose();  // strided source
  Tensor y = x.to(cpu(1));
  CHECK(y.device() == cpu(1));
  CHECK(y.is_contiguous());
  CHECK_FALSE(y.shares_storage(x));
  CHECK(y.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
}
