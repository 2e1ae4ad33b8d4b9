#include <strata/data/mnist.h>

#include <filesystem>
#include <vector>

#include <strata/core/error.h>
#include <strata/data/idx.h>

namespace strata::data {

namespace {

std::string find_file(const std::string& dir, const std::vector<std::string>& names) {
  std::string tried;
  for (const auto& name : names) {
    for (const char* suffix : {".gz", ""}) {
      const auto path = std::filesystem::path(dir) / (name + suffix);
      if (std::filesystem::is_regular_file(path)) return path.string();
      tried += tried.empty() ? "" : ", ";
      tried += path.filename().string();
    }
  }
  fail("mnist: no MNIST file in '", dir, "' (tried ", tried, ")");
}

// The usual names of a split's two files (images, labels), without the ".gz" suffix.
std::vector<std::vector<std::string>> split_names(Split split) {
  const std::string prefix = split == Split::Train ? "train" : "t10k";
  return {{prefix + "-images-idx3-ubyte", prefix + "-images.idx3-ubyte"},
          {prefix + "-labels-idx1-ubyte", prefix + "-labels.idx1-ubyte"}};
}

}  // namespace

bool has_mnist_split(const std::string& dir, Split split) {
  for (const auto& names : split_names(split))
    for (const auto& name : names)
      for (const char* suffix : {".gz", ""})
        if (std::filesystem::is_regular_file(std::filesystem::path(dir) / (name + suffix))) return true;
  return false;
}

std::pair<std::string, std::string> mnist_paths(const std::string& dir, Split split) {
  const auto names = split_names(split);
  return {find_file(dir, names[0]), find_file(dir, names[1])};
}

LabeledArrays read_mnist_files(const std::string& images_path, const std::string& labels_path) {
  const IdxArray images = read_idx(images_path);
  STRATA_CHECK(images.type_code == 0x08 && images.dims.size() == 3, "mnist: '", images_path,
               "' is not an MNIST image file: expected magic 0x00000803 (u8, 3 dimensions), got ",
               "type 0x", std::hex, int(images.type_code), std::dec, " with ", images.dims.size(),
               " dimensions ", shape_str(images.dims));
  STRATA_CHECK(images.dims[1] > 0 && images.dims[2] > 0, "mnist: '", images_path,
               "' has empty images: dimensions ", shape_str(images.dims));
  const IdxArray labels = read_idx(labels_path);
  STRATA_CHECK(labels.type_code == 0x08 && labels.dims.size() == 1, "mnist: '", labels_path,
               "' is not an MNIST label file: expected magic 0x00000801 (u8, 1 dimension), got ",
               "type 0x", std::hex, int(labels.type_code), std::dec, " with ", labels.dims.size(),
               " dimensions ", shape_str(labels.dims));
  STRATA_CHECK(images.dims[0] == labels.dims[0], "mnist: '", images_path, "' holds ",
               images.dims[0], " images but '", labels_path, "' holds ", labels.dims[0], " labels");

  const int64_t n = images.dims[0];
  const int64_t h = images.dims[1];
  const int64_t w = images.dims[2];
  LabeledArrays out;
  out.features = Tensor::empty({n, h, w, 1}, kFloat32, Device());  // host memory, filled below
  out.labels = Tensor::empty({n}, kInt64, Device());
  const uint8_t* lsrc = labels.data();
  int64_t* ldst = out.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    STRATA_CHECK(lsrc[i] <= 9, "mnist: '", labels_path, "' is corrupt: label ", int(lsrc[i]),
                 " of record ", i, " outside [0, 9]");
    ldst[i] = lsrc[i];
  }
  const uint8_t* isrc = images.data();
  float* idst = out.features.data<float>();
  const int64_t total = n * h * w;
  constexpr float kScale = 1.0f / 255.0f;
  for (int64_t i = 0; i < total; ++i) idst[i] = float(isrc[i]) * kScale;
  return out;
}

LabeledArrays read_mnist(const std::string& dir, Split split) {
  auto [images, labels] = mnist_paths(dir, split);
  return read_mnist_files(images, labels);
}

Dataset mnist_files(const std::string& images_path, const std::string& labels_path) {
  return read_mnist_files(images_path, labels_path).dataset();
}

Dataset mnist(const std::string& dir, Split split) { return read_mnist(dir, split).dataset(); }

}  // namespace strata::data
