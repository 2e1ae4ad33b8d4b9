// The GPU tests' main. Without a CUDA device they report "skipped" to CTest (exit code 77,
// SKIP_RETURN_CODE), except the --no-device run, which checks what a user without a GPU
// sees (a clear strata::Error) and is itself skipped where a GPU exists.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <string>

#include <strata/core/dispatch.h>
#include <strata/core/error.h>
#include <strata/core/ops.h>
#include <strata/kernels/cuda/runtime.h>

namespace {

constexpr int kSkip = 77;

// With no device: every way onto cuda:0 raises a strata::Error that says why.
int check_no_device() {
  using namespace strata;
  int failures = 0;
  auto expect_error = [&](const char* what, auto&& fn) {
    try {
      fn();
      std::printf("FAIL %s: no error raised\n", what);
      ++failures;
    } catch (const Error& e) {
      const std::string m = e.what();
      const bool clear = m.find("cuda:0 is not available: no CUDA device") != std::string::npos;
      std::printf("%s %s: %s\n", clear ? "ok" : "FAIL", what, m.c_str());
      failures += clear ? 0 : 1;
    }
  };
  expect_error("zeros on cuda:0", [] { (void)zeros({3}, kFloat32, cuda(0)); });
  expect_error("Tensor::to(cuda:0)", [] { (void)ones({2, 2}).to(cuda(0)); });
  expect_error("Tensor::pin_memory", [] { (void)ones({2, 2}).pin_memory(); });
  expect_error("DeviceGuard + op", [] {
    DeviceGuard on(cuda(0));
    (void)arange(0, 4);
  });
  expect_error("create_stream", [] { (void)create_stream(cuda(0)); });
  // DESIGN's registry rule in a CUDA build: every op that needs a kernel has a CUDA one
  // (views are computed by the front-end; a custom gradient runs the user's ops).
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    if (is_view_op(op) || op == OpId::CustomGradient) continue;
    if (find_kernel(op, DeviceType::CUDA) == nullptr) {
      std::printf("FAIL no CUDA kernel registered for %s\n", op_name(op));
      ++failures;
    }
  }
  if (stream_backend(DeviceType::CUDA) == nullptr || stream_backend(DeviceType::CUDA)->device_count() != 0) {
    std::printf("FAIL the CUDA backend is not registered, or reports devices\n");
    ++failures;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = strata::cuda_backend::device_count();
  if (argc > 1 && std::strcmp(argv[1], "--no-device") == 0) {
    if (n > 0) {
      std::printf("skipped: %d CUDA device(s) present\n", n);
      return kSkip;
    }
    return check_no_device();
  }
  if (n == 0) {
    std::printf("skipped: no CUDA device (%s)\n", strata::cuda_backend::no_device_reason().c_str());
    return kSkip;
  }
  const strata::cuda_backend::DeviceProperties p = strata::cuda_backend::properties(0);
  std::printf("cuda:0: %s, sm_%d%d, %d SMs, %.1f GiB\n", p.name.c_str(), p.major, p.minor, p.multiprocessors,
              double(p.total_memory) / (1 << 30));
  return Catch::Session().run(argc, argv);
}
