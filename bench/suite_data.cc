// data suite: the input pipeline (shuffle -> batch -> prefetch over MNIST-shaped records)
// against a plain loop that copies the same bytes.
#include <cstring>
#include <filesystem>

#include "bench/bench.h"
#include <strata/core/ops.h>
#include <strata/data/mnist.h>
#include <strata/data/synthetic.h>

namespace strata::bench {

std::vector<Result> data_suite(const Options& o) {
  std::vector<Result> out;
  // The real MNIST test images when STRATA_MNIST_DIR points at them, else zeros of the same shape.
  int64_t n = o.quick ? 2000 : 10000;
  Tensor images = zeros({n, 28, 28, 1});
  Tensor labels = zeros({n}, kInt64);
  std::string source = "mnist-shaped";
  const char* dir = std::getenv("STRATA_MNIST_DIR");
  if (dir && std::filesystem::exists(dir)) {
    data::LabeledArrays arrays = data::read_mnist(dir, data::Split::Test);
    images = arrays.features.contiguous();
    labels = arrays.labels;
    n = images.dim(0);
    source = "mnist";
  }
  data::Dataset ds = data::Dataset::from_tensor_slices({images, labels});
  const int64_t batch = 128;
  Timing t = time_it([&] {
    for (auto& b : ds.shuffle(10000, 1).batch(batch).prefetch(2)) (void)b;
  }, o.quick ? 2 : 5, 1, 1);
  // Baseline: copy every record's bytes once into batch buffers, in shuffled order.
  std::vector<float> buf(size_t(batch) * 784);
  const float* src = images.data<float>();
  Timing copy = time_it([&] {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = (i * 7919) % n;
      std::memcpy(buf.data() + (i % batch) * 784, src + j * 784, 784 * 4);
    }
  }, o.quick ? 2 : 5, 1, 1);
  out.push_back({"data", source + " shuffle(10000)->batch(128)->prefetch(2)", double(n) / t.median_s, "examples/s",
                 t.spread(), "plain shuffled copy of the same bytes", double(n) / copy.median_s});
  return out;
}

}  // namespace strata::bench
