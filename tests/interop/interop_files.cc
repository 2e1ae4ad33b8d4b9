// The strata half of the interop tests (tests/interop/check_interop.py holds the other):
// writes TensorBoard event files and safetensors checkpoints for the real `tensorboard`
// and `safetensors` packages to read, and reads safetensors files those packages wrote.
//
//   strata_interop_files write DIR   DIR/events/ (scalars, a histogram, a text summary, images),
//                                    DIR/tensors.{safetensors,manifest.json} (save_tensors:
//                                    every dtype, a transposed view, a scalar, an empty
//                                    tensor), DIR/model/ckpt-3 (train::Checkpoint of a
//                                    small model and its Adam slots) and DIR/model.json
//                                    (the model's variables by object path)
//   strata_interop_files read FILE   prints read_safetensors(FILE) as JSON on stdout:
//                                    {"metadata": {...}, "tensors": {name: {"dtype",
//                                    "shape", "values"}}}; floats as doubles (exact for
//                                    every dtype), integers and bools as integers
// The values written are fixed here and in check_interop.py (kInteropValues / VALUES), so
// that the Python side computes what it expects with NumPy and ml_dtypes, not from strata.
// Errors print "strata_interop_files: <message>" on stderr and exit 1.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <strata/strata.h>
#include <strata/train/checkpoint_file.h>

namespace fs = std::filesystem;
using namespace strata;

namespace {

// The same list as VALUES in check_interop.py. 1/3 and pi round differently in float16,
// bfloat16 and float32; 65504 is float16's largest finite value; -0.0 keeps its sign bit.
const std::vector<float> kInteropValues = {0.0f,   -0.0f,  1.0f,        -2.5f,  1.0f / 3.0f, 3.14159265f,
                                           65504.f, 1e-3f, -1234.5678f, 0.1f,   7.0f,        -1e-5f};

std::vector<float> interop_values(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = kInteropValues[i % kInteropValues.size()];
  return v;
}

void write_summaries(const fs::path& dir) {
  train::SummaryWriter writer(dir, /*flush_interval_seconds=*/0.0);
  // Expected by check_interop.py: train/loss = 1 / (step + 1) at steps 0..9, accuracy =
  // step / 20 at steps 0, 5, 10, 15.
  for (int64_t step = 0; step < 10; ++step) writer.scalar("train/loss", 1.0 / double(step + 1), step);
  for (int64_t step = 0; step < 20; step += 5) writer.scalar("accuracy", double(step) / 20.0, step);
  writer.histogram("weights", Tensor::from_vector(interop_values(12), {3, 4}), 3);
  writer.text("notes", "strata **interop** check", 1);
  // Two 5 x 7 grey images at step 2: pixel (y, x) of image i = (i * 35 + y * 7 + x) / 80.
  std::vector<float> pixels(2 * 5 * 7);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = float(i) / 80.0f;
  writer.image("digits", Tensor::from_vector(pixels, {2, 5, 7, 1}), 2, /*max_outputs=*/2);
  writer.close();
}

void write_tensors(const fs::path& prefix) {
  const std::vector<float> v = interop_values(12);
  std::map<std::string, Tensor> tensors;
  tensors["f32"] = Tensor::from_vector(v, {3, 4});
  tensors["f64"] = Tensor::from_vector(v, {12}, kFloat64);
  tensors["f16"] = Tensor::from_vector(v, {2, 6}, kFloat16);
  tensors["bf16"] = Tensor::from_vector(v, {4, 3}, kBFloat16);
  tensors["i32"] = Tensor::from_vector(std::vector<int32_t>{0, -1, 2147483647, -2147483647 - 1}, {4});
  tensors["i64"] = Tensor::from_vector(std::vector<int64_t>{int64_t(1) << 40, -3, 0, 42}, {2, 2});
  tensors["bool"] = Tensor::from_vector(std::vector<bool>{true, false, false, true, true}, {5});
  // A strided view: written contiguously as the transpose of f32.
  tensors["f32_transposed"] = Tensor::from_vector(v, {3, 4}).transpose();
  tensors["scalar"] = Tensor::scalar(-2.5);
  tensors["empty"] = Tensor::empty({0, 3});
  train::save_tensors(prefix, tensors, nlohmann::json{{"step", 7}, {"note", "interop"}});
}

// A small model after one Adam step, saved by train::Checkpoint: what strata-train's
// checkpoints hold (object paths, optimizer slots, the iterations counter).
void write_model_checkpoint(const fs::path& dir, const fs::path& values_json) {
  nn::set_global_seed(5);
  nn::Sequential model{nn::Dense(4, 3), nn::ReLU(), nn::Dense(3, 2)};
  optim::Optimizer optimizer = optim::Adam(0.01);
  const std::vector<Variable> variables = model.trainable_variables();
  {
    autograd::GradientTape tape;
    Tensor x = Tensor::from_vector(interop_values(8), {2, 4});
    Tensor loss = sum(square(model(x)));
    optimizer.apply_gradients(tape.gradient(loss, variables), variables);
  }
  fs::create_directories(dir);
  train::Checkpoint checkpoint{{"model", model}, {"optimizer", optimizer}};
  checkpoint.save(dir / "ckpt-3", 3);
  nlohmann::json out = nlohmann::json::object();
  for (const auto& nv : model.named_variables("model")) {
    out[nv.path] = {{"shape", nv.variable.value().shape()}, {"values", nv.variable.value().to_vector<double>()}};
  }
  std::FILE* f = std::fopen(values_json.c_str(), "w");
  STRATA_CHECK(f != nullptr, "cannot write ", values_json.string());
  const std::string text = out.dump();
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

nlohmann::json tensor_json(const Tensor& t) {
  nlohmann::json j{{"dtype", train::safetensors_dtype_name(t.dtype())}, {"shape", t.shape()}};
  if (t.dtype() == kBool) {
    std::vector<int> ints;
    for (bool b : t.to_vector<bool>()) ints.push_back(b ? 1 : 0);
    j["values"] = ints;
  } else if (t.dtype() == kInt32 || t.dtype() == kInt64) {
    j["values"] = t.to_vector<int64_t>();
  } else {
    j["values"] = t.to_vector<double>();  // exact for float16, bfloat16, float32, float64
  }
  return j;
}

void read_file(const fs::path& path) {
  const train::SafetensorsContents contents = train::read_safetensors(path);
  nlohmann::json out{{"metadata", contents.metadata}, {"tensors", nlohmann::json::object()}};
  for (const auto& [name, t] : contents.tensors) out["tensors"][name] = tensor_json(t);
  // Signed zeros and non-finite values survive only through a textual form nlohmann would
  // lose (-0.0 prints as -0.0, inf/nan as null): the values here are finite by design.
  std::cout << out.dump() << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 2 && args[0] == "write") {
      const fs::path dir = args[1];
      fs::create_directories(dir);
      write_summaries(dir / "events");
      write_tensors(dir / "tensors");
      write_model_checkpoint(dir / "model", dir / "model.json");
      return 0;
    }
    if (args.size() == 2 && args[0] == "read") {
      read_file(args[1]);
      return 0;
    }
    std::fprintf(stderr, "usage: strata_interop_files write DIR | read FILE\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata_interop_files: %s\n", e.what());
    return 1;
  }
}
