// strata-train --data mnist:DIR picks its split from the files present (DESIGN.md): with
// the train files, all train images train and all test images evaluate (Keras's split);
// with only the test file, its first 8,000 images train and its last 2,000 evaluate;
// --train-examples / --eval-examples override both. The real 60k/10k files are not in the
// repository: the test writes small IDX files with the same names.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/tools/strata_train_runner.h"

namespace mnist_split_test {

namespace fs = std::filesystem;

void put_be32(std::ofstream& f, uint32_t v) {
  const unsigned char b[4] = {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
  f.write(reinterpret_cast<const char*>(b), 4);
}

// n 28x28 images (pixel value depends on the label, so the data are learnable) and labels.
void write_idx_pair(const fs::path& dir, const std::string& prefix, int n) {
  std::ofstream images(dir / (prefix + "-images-idx3-ubyte"), std::ios::binary);
  put_be32(images, 0x00000803);
  put_be32(images, uint32_t(n));
  put_be32(images, 28);
  put_be32(images, 28);
  std::ofstream labels(dir / (prefix + "-labels-idx1-ubyte"), std::ios::binary);
  put_be32(labels, 0x00000801);
  put_be32(labels, uint32_t(n));
  for (int i = 0; i < n; ++i) {
    const uint8_t label = uint8_t(i % 10);
    const std::vector<char> pixels(28 * 28, char(label * 25));
    images.write(pixels.data(), std::streamsize(pixels.size()));
    labels.put(char(label));
  }
}

struct SplitDir {
  fs::path path = fs::temp_directory_path() / ("strata_mnist_split_" + std::to_string(::getpid()));
  SplitDir() {
    fs::remove_all(path);
    fs::create_directories(path / "data");
  }
  ~SplitDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  SplitDir(const SplitDir&) = delete;
  SplitDir& operator=(const SplitDir&) = delete;
};

// Runs a two-step training and returns its report.
nlohmann::json train_report(const SplitDir& d, const std::string& tag, const std::string& extra, std::string* output) {
  const fs::path model_dir = d.path / ("model_" + tag), report = d.path / ("report_" + tag + ".json");
  const auto r = strata::testing::run_strata_train(
      "--data mnist:" + (d.path / "data").string() + " --steps 2 --steps-per-loop 1 --global-batch 8 --quiet " +
      "--model-dir " + model_dir.string() + " --report " + report.string() + " " + extra);
  *output = r.output;
  if (r.status != 0) return nullptr;
  return nlohmann::json::parse(std::ifstream(report));
}

}  // namespace mnist_split_test

TEST_CASE("strata-train: mnist:DIR trains on the train files and evaluates on the test files when present") {
  using namespace mnist_split_test;
  SplitDir d;
  write_idx_pair(d.path / "data", "t10k", 40);
  std::string out;

  // Only the test file: today's split, which needs 10,000 images by default...
  REQUIRE(train_report(d, "test_only_default", "", &out) == nullptr);
  REQUIRE_THAT(out, Catch::Contains("fewer than --train-examples + --eval-examples = 10000"));
  // ...and takes the first N / last M with the flags.
  nlohmann::json j = train_report(d, "test_only", "--train-examples 24 --eval-examples 8", &out);
  INFO(out);
  REQUIRE(j != nullptr);
  REQUIRE(j["train_examples"] == 24);
  REQUIRE(j["eval_examples"] == 8);

  // With the train files: all of them train, all test images evaluate.
  write_idx_pair(d.path / "data", "train", 56);
  j = train_report(d, "keras_split", "", &out);
  INFO(out);
  REQUIRE(j != nullptr);
  REQUIRE(j["train_examples"] == 56);
  REQUIRE(j["eval_examples"] == 40);
  REQUIRE_THAT(out, Catch::Contains("56 train images train, 40 test images evaluate"));
  // The flags still override.
  j = train_report(d, "keras_split_flags", "--train-examples 16 --eval-examples 12", &out);
  INFO(out);
  REQUIRE(j != nullptr);
  REQUIRE(j["train_examples"] == 16);
  REQUIRE(j["eval_examples"] == 12);
  REQUIRE(train_report(d, "too_many", "--train-examples 57", &out) == nullptr);
  REQUIRE_THAT(out, Catch::Contains("56 train and 40 test images"));

  // A train image file without its label file is an error naming it, not a silent fallback.
  fs::remove(d.path / "data" / "train-labels-idx1-ubyte");
  REQUIRE(train_report(d, "half_train", "", &out) == nullptr);
  REQUIRE_THAT(out, Catch::Contains("train-labels"));
}
