// strata-golden: runs golden cases (../shared/golden format) with strata's ops, tape and
// optimizers, and compares values and gradients with the reference.
//
//   strata-golden --cases DIR... [--kind graph|optimizer] [--device cpu|cuda:0]
//
// Prints each failing case with its worst element and a closing line "N passed, M failed";
// exits 1 on any failure. With --device cuda:N each case's inputs are copied to the device,
// its program (or optimizer steps) runs there with the device current, and the results are
// copied back and compared on the host.
#include <CLI/CLI.hpp>
#include <iostream>

#include <strata/autograd/autograd.h>
#include <strata/core/stream.h>
#include "tools/golden/golden_program.h"
#include "tools/golden/golden_optimizer.h"

using namespace strata;

namespace {

// "" on success, else what went wrong.
std::string run_graph_case(const golden::Case& c, Device device) {
  std::map<std::string, Tensor> env;
  std::vector<std::string> grad_names;
  std::vector<Tensor> sources;
  for (const auto& [name, input] : c.inputs) {
    env[name] = input.value.to(device);
    if (input.grad) {
      grad_names.push_back(name);
      sources.push_back(env[name]);
    }
  }
  autograd::GradientTape tape;
  for (const Tensor& s : sources) tape.watch(s);
  std::map<std::string, Tensor> values = golden::run_program(c, env);
  std::string failures;
  for (const auto& [name, want] : c.expect_values) {
    auto it = values.find(name);
    if (it == values.end()) {
      failures += "\n  value '" + name + "': not produced by the program";
      continue;
    }
    const std::string diff = golden::compare(it->second, want, c.tol);
    if (!diff.empty()) failures += "\n  value '" + name + "': " + diff;
  }
  if (!c.expect_grads.empty()) {
    auto target = values.find(c.target);
    if (target == values.end()) return "\n  target '" + c.target + "' was not produced";
    std::vector<Tensor> grads = tape.gradient(target->second, sources, {}, autograd::UnconnectedGradients::Zero);
    for (size_t i = 0; i < grad_names.size(); ++i) {
      auto want = c.expect_grads.find(grad_names[i]);
      if (want == c.expect_grads.end()) continue;
      const std::string diff = golden::compare(grads[i], want->second, c.tol);
      if (!diff.empty()) failures += "\n  grad '" + grad_names[i] + "': " + diff;
    }
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata-golden: run golden op/gradient/optimizer cases against strata"};
  std::vector<std::string> dirs;
  std::string kind, device_name = "cpu";
  app.add_option("--cases", dirs, "folders (or files) of golden cases")->required()->expected(1, -1);
  app.add_option("--kind", kind, "run only cases of this kind")->check(CLI::IsMember({"graph", "optimizer"}));
  app.add_option("--device", device_name, "device to run on (cpu, cuda:0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  Device device;
  try {
    device = Device::parse(device_name);
  } catch (const Error& e) {
    std::cerr << "strata-golden: " << e.what() << "\n";
    return 2;
  }
  int passed = 0, failed = 0;
  for (const std::string& dir : dirs) {
    std::vector<std::filesystem::path> files;
    try {
      files = std::filesystem::is_directory(dir) ? golden::case_files(dir)
                                                 : std::vector<std::filesystem::path>{dir};
    } catch (const std::exception& e) {
      std::cerr << "strata-golden: " << e.what() << "\n";
      return 2;
    }
    for (const auto& file : files) {
      std::string failure;
      std::string name = file.filename().string();
      try {
        golden::Case c = golden::load_case(file);
        name = c.name.empty() ? name : c.name;
        if (!kind.empty() && c.kind != kind) continue;
        DeviceGuard on(device);  // creation ops inside the program land on the device too
        if (c.kind == "graph") {
          failure = run_graph_case(c, device);
        } else if (c.kind == "optimizer") {
          failure = golden::run_optimizer_case(c, device);
        } else {
          failure = "\n  unknown case kind '" + c.kind + "'";
        }
      } catch (const std::exception& e) {
        failure = std::string("\n  error: ") + e.what();
      }
      if (failure.empty()) {
        ++passed;
      } else {
        ++failed;
        std::cout << "FAIL " << name << " (" << file.string() << ")" << failure << "\n";
      }
    }
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
