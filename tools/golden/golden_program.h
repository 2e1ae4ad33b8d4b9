// Golden cases (../shared/golden, format in its README.md): loading a case file and running
// a "graph" case's program forward with strata's ops.
//
// Header-only so that the core tests, autograd's tests and the strata-golden tool can share
// one op-name -> strata-call mapping until it moves into a library. Every unsupported op,
// attr or value throws strata::Error naming it ("unknown op 'x'", "unknown attr 'y' for op
// 'x'"), so a runner fails that case instead of skipping it silently.
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/error.h>
#include <strata/core/ops.h>
#include <strata/core/tensor.h>

namespace strata::golden {

using json = nlohmann::json;

struct Input {
  Tensor value;
  bool grad = false;  // the case expects d(target)/d(this input)
};

struct Step {
  std::string out;
  std::string op;
  std::vector<std::string> in;
  json attrs = json::object();
};

struct Tolerance {
  double rtol = 0.0;
  double atol = 0.0;
};

struct Case {
  std::string name;
  std::string kind;   // "graph" or "optimizer"
  std::string dtype;  // the case's compute dtype ("float32", "float64")
  std::filesystem::path path;
  Tolerance tol;
  // kind == "graph"
  std::map<std::string, Input> inputs;
  std::vector<Step> program;
  std::string target;
  std::map<std::string, Tensor> expect_values;  // float64 references
  std::map<std::string, Tensor> expect_grads;   // input name -> float64 gradient
  // kind == "optimizer"
  std::string optimizer;  // sgd | adam | adamw
  json hparams = json::object();
  Tensor param;
  std::vector<Tensor> grads;                    // fed at step k
  std::vector<Tensor> expect_params_after_step;  // value after step k+1
};

// ---- loading ----

namespace detail {

inline double json_number(const json& v, const std::string& where) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {  // JSON has no NaN/Infinity literals; accept them spelled out
    const std::string s = v.get<std::string>();
    if (s == "nan" || s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf" || s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-inf" || s == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  fail("golden: ", where, ": expected a number, got ", v.dump());
}

inline const json& member(const json& j, const char* key, const std::string& where) {
  STRATA_CHECK(j.is_object() && j.contains(key), "golden: ", where, ": missing field '", key, "'");
  return j.at(key);
}

}  // namespace detail

// {shape, dtype, data (row-major, flat)} -> a CPU tensor of that dtype (float64 when the
// object names no dtype).
inline Tensor tensor_from_json(const json& j, const std::string& where) {
  const json& shape_j = detail::member(j, "shape", where);
  const json& data_j = detail::member(j, "data", where);
  STRATA_CHECK(shape_j.is_array() && data_j.is_array(), "golden: ", where,
               ": 'shape' and 'data' must be arrays");
  Shape shape;
  for (const json& d : shape_j) {
    STRATA_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, "golden: ", where,
                 ": bad extent ", d.dump(), " in shape");
    shape.push_back(d.get<int64_t>());
  }
  const DType dtype = j.contains("dtype") ? dtype_from_name(j.at("dtype").get<std::string>())
                                          : kFloat64;
  STRATA_CHECK(int64_t(data_j.size()) == numel_of(shape), "golden: ", where, ": ", data_j.size(),
               " values for shape ", shape_str(shape));
  if (is_integral(dtype)) {  // ids and labels: exact integers
    std::vector<int64_t> v;
    v.reserve(data_j.size());
    for (const json& x : data_j) {
      STRATA_CHECK(x.is_number_integer(), "golden: ", where, ": expected integer data, got ",
                   x.dump());
      v.push_back(x.get<int64_t>());
    }
    return Tensor::from_vector(v, shape, dtype);
  }
  std::vector<double> v;
  v.reserve(data_j.size());
  for (const json& x : data_j) v.push_back(detail::json_number(x, where));
  return Tensor::from_vector(v, shape, dtype);
}

inline Case parse_case(const json& j, const std::filesystem::path& path = {}) {
  Case c;
  c.path = path;
  const std::string where = path.empty() ? std::string("case") : path.filename().string();
  c.kind = detail::member(j, "kind", where).get<std::string>();
  c.name = j.value("name", path.stem().string());
  c.dtype = j.value("dtype", std::string("float32"));
  if (j.contains("tol")) {
    c.tol.rtol = j.at("tol").value("rtol", 0.0);
    c.tol.atol = j.at("tol").value("atol", 0.0);
  }
  const json& expect = detail::member(j, "expect", where);
  if (c.kind == "graph") {
    for (const auto& [name, spec] : detail::member(j, "inputs", where).items()) {
      c.inputs[name] = Input{tensor_from_json(spec, where + ": input '" + name + "'"),
                             spec.value("grad", false)};
    }
    for (const json& s : detail::member(j, "program", where)) {
      Step step;
      step.out = detail::member(s, "out", where).get<std::string>();
      step.op = detail::member(s, "op", where).get<std::string>();
      for (const json& n : detail::member(s, "in", where)) step.in.push_back(n.get<std::string>());
      if (s.contains("attrs") && !s.at("attrs").is_null()) step.attrs = s.at("attrs");
      STRATA_CHECK(step.attrs.is_object(), "golden: ", where, ": attrs of step '", step.out,
                   "' must be an object");
      c.program.push_back(std::move(step));
    }
    c.target = detail::member(j, "target", where).get<std::string>();
    if (expect.contains("values")) {
      for (const auto& [name, t] : expect.at("values").items()) {
        c.expect_values[name] = tensor_from_json(t, where + ": expect.values." + name);
      }
    }
    if (expect.contains("grads")) {
      for (const auto& [name, t] : expect.at("grads").items()) {
        c.expect_grads[name] = tensor_from_json(t, where + ": expect.grads." + name);
      }
    }
  } else if (c.kind == "optimizer") {
    c.optimizer = detail::member(j, "optimizer", where).get<std::string>();
    c.hparams = j.value("hparams", json::object());
    const DType dt = dtype_from_name(c.dtype);
    auto in_dtype = [&](json t) {  // param/grads are given without a dtype: use the case's
      if (!t.contains("dtype")) t["dtype"] = dtype_name(dt);
      return t;
    };
    c.param = tensor_from_json(in_dtype(detail::member(j, "param", where)), where + ": param");
    int k = 0;
    for (const json& g : detail::member(j, "grads", where)) {
      c.grads.push_back(tensor_from_json(in_dtype(g), where + ": grads[" + std::to_string(k++) + "]"));
    }
    k = 0;
    for (const json& p : detail::member(expect, "params_after_each_step", where)) {
      c.expect_params_after_step.push_back(
          tensor_from_json(p, where + ": params_after_each_step[" + std::to_string(k++) + "]"));
    }
  } else {
    fail("golden: ", where, ": unknown case kind '", c.kind, "' (expected graph or optimizer)");
  }
  return c;
}

inline Case load_case(const std::filesystem::path& path) {
  std::ifstream f(path);
  STRATA_CHECK(f.good(), "golden: cannot open case file ", path.string());
  json j;
  try {
    f >> j;
  } catch (const json::exception& e) {
    fail("golden: ", path.string(), ": invalid JSON: ", e.what());
  }
  try {
    return parse_case(j, path);
  } catch (const json::exception& e) {  // wrong JSON types in known fields
    fail("golden: ", path.filename().string(), ": malformed case: ", e.what());
  }
}

// The *.json files of a case folder, sorted by name.
inline std::vector<std::filesystem::path> case_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".json") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---- running a program ----

namespace detail {

// Typed access to one step's attrs; remembers which were read so that leftovers are
// reported as unknown.
class Attrs {
 public:
  Attrs(const Step& s) : step_(s) {}  // NOLINT

  bool has(const char* key) const { return step_.attrs.contains(key) && !step_.attrs.at(key).is_null(); }

  int64_t integer(const char* key, std::optional<int64_t> def = std::nullopt) {
    const json* v = get(key, def.has_value());
    if (!v) return *def;
    STRATA_CHECK(v->is_number_integer(), where(key), ": expected an integer, got ", v->dump());
    return v->get<int64_t>();
  }
  double number(const char* key, std::optional<double> def = std::nullopt) {
    const json* v = get(key, def.has_value());
    if (!v) return *def;
    return json_number(*v, where(key));
  }
  bool boolean(const char* key, std::optional<bool> def = std::nullopt) {
    const json* v = get(key, def.has_value());
    if (!v) return *def;
    STRATA_CHECK(v->is_boolean(), where(key), ": expected true or false, got ", v->dump());
    return v->get<bool>();
  }
  std::string string(const char* key, std::optional<std::string> def = std::nullopt) {
    const json* v = get(key, def.has_value());
    if (!v) return *def;
    STRATA_CHECK(v->is_string(), where(key), ": expected a string, got ", v->dump());
    return v->get<std::string>();
  }
  std::vector<int64_t> ints(const char* key, std::optional<std::vector<int64_t>> def = std::nullopt) {
    const json* v = get(key, def.has_value());
    if (!v) return *def;
    STRATA_CHECK(v->is_array(), where(key), ": expected a list of integers, got ", v->dump());
    std::vector<int64_t> out;
    for (const json& x : *v) {
      STRATA_CHECK(x.is_number_integer(), where(key), ": expected a list of integers, got ",
                   v->dump());
      out.push_back(x.get<int64_t>());
    }
    return out;
  }
  // `axes`: null (all axes), an integer or a list of integers.
  Axes axes(const char* key) {
    const json* v = get(key, true);
    if (!v) return std::nullopt;
    if (v->is_number_integer()) return std::vector<int64_t>{v->get<int64_t>()};
    return ints(key);
  }
  std::array<int64_t, 2> pair(const char* key, std::optional<std::array<int64_t, 2>> def = std::nullopt) {
    const json* v = get(key, def.has_value());
    if (!v) return *def;
    if (v->is_number_integer()) return {v->get<int64_t>(), v->get<int64_t>()};
    const auto l = ints(key);
    STRATA_CHECK(l.size() == 2, where(key), ": expected two integers, got ", v->dump());
    return {l[0], l[1]};
  }
  Padding padding(const char* key = "padding") {
    std::string p = string(key, "VALID");
    std::transform(p.begin(), p.end(), p.begin(), [](unsigned char c) { return char(std::toupper(c)); });
    if (p == "SAME") return Padding::Same;
    if (p == "VALID") return Padding::Valid;
    fail(where(key), ": expected \"SAME\" or \"VALID\", got \"", p, "\"");
  }
  // Image ops accept only TensorFlow's NHWC layout.
  void nhwc() {
    const std::string f = string("data_format", "NHWC");
    STRATA_CHECK(f == "NHWC", where("data_format"), ": only \"NHWC\" is supported, got \"", f, "\"");
  }
  // Throws for any attr the op did not read.
  void finish() const {
    for (const auto& [key, value] : step_.attrs.items()) {
      STRATA_CHECK(read_.count(key) != 0, "unknown attr '", key, "' for op '", step_.op, "'");
    }
  }

 private:
  const json* get(const char* key, bool optional) {
    read_.insert(key);
    if (!has(key)) {
      STRATA_CHECK(optional, "op '", step_.op, "': missing attr '", key, "'");
      return nullptr;
    }
    return &step_.attrs.at(key);
  }
  std::string where(const char* key) const {
    return "attr '" + std::string(key) + "' of op '" + step_.op + "'";
  }

  const Step& step_;
  std::set<std::string> read_;
};

inline void require_arity(const Step& s, const std::vector<Tensor>& in, size_t n) {
  STRATA_CHECK(in.size() == n, "op '", s.op, "' expects ", n, " input", n == 1 ? "" : "s",
               ", got ", in.size());
}

}  // namespace detail

// Runs one step: the strata call for `step.op` on already-resolved inputs.
inline Tensor apply_step(const Step& step, const std::vector<Tensor>& in) {
  using UnaryFn = Tensor (*)(const Tensor&);
  using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);
  using ReduceFn = Tensor (*)(const Tensor&, const Axes&, bool);
  static const std::map<std::string, UnaryFn> kUnary = {
      {"neg", &strata::neg},         {"exp", &strata::exp},
      {"log", &strata::log},         {"sqrt", &strata::sqrt},
      {"rsqrt", &strata::rsqrt},     {"abs", &strata::abs},
      {"square", &strata::square},   {"sin", &strata::sin},
      {"cos", &strata::cos},         {"tanh", &strata::tanh},
      {"sigmoid", &strata::sigmoid}, {"relu", &strata::relu},
      {"softplus", &strata::softplus}, {"sign", &strata::sign},
      {"reciprocal", &strata::reciprocal}, {"floor", &strata::floor}};
  static const std::map<std::string, BinaryFn> kBinary = {
      {"add", &strata::add}, {"sub", &strata::sub}, {"mul", &strata::mul},
      {"div", &strata::div}, {"pow", &strata::pow}, {"maximum", &strata::maximum},
      {"minimum", &strata::minimum}};
  static const std::map<std::string, ReduceFn> kReduce = {
      {"sum", &strata::sum}, {"mean", &strata::mean}, {"max", &strata::max},
      {"min", &strata::min}, {"prod", &strata::prod}, {"logsumexp", &strata::logsumexp}};

  detail::Attrs a(step);
  const std::string& op = step.op;
  Tensor out;
  if (auto it = kUnary.find(op); it != kUnary.end()) {
    detail::require_arity(step, in, 1);
    out = it->second(in[0]);
  } else if (auto ib = kBinary.find(op); ib != kBinary.end()) {
    detail::require_arity(step, in, 2);
    out = ib->second(in[0], in[1]);
  } else if (auto ir = kReduce.find(op); ir != kReduce.end()) {
    detail::require_arity(step, in, 1);
    const Axes axes = a.axes("axes");
    out = ir->second(in[0], axes, a.boolean("keepdims", false));
  } else if (op == "gelu") {
    detail::require_arity(step, in, 1);
    const std::string approx = a.string("approximate", "none");
    STRATA_CHECK(approx == "none" || approx == "tanh",
                 "attr 'approximate' of op 'gelu': expected \"none\" or \"tanh\", got \"", approx, "\"");
    out = gelu(in[0], approx == "tanh");
  } else if (op == "matmul") {
    detail::require_arity(step, in, 2);
    const bool ta = a.boolean("transpose_a", false);
    out = matmul(in[0], in[1], ta, a.boolean("transpose_b", false));
  } else if (op == "reshape") {
    detail::require_arity(step, in, 1);
    out = reshape(in[0], a.ints("shape"));
  } else if (op == "transpose") {
    detail::require_arity(step, in, 1);
    std::vector<int64_t> reversed;
    for (int64_t i = in[0].ndim(); i-- > 0;) reversed.push_back(i);
    out = permute(in[0], a.ints("perm", reversed));
  } else if (op == "broadcast_to") {
    detail::require_arity(step, in, 1);
    out = broadcast_to(in[0], a.ints("shape"));
  } else if (op == "concat") {
    STRATA_CHECK(!in.empty(), "op 'concat' expects at least one input");
    out = concat(in, a.integer("axis"));
  } else if (op == "slice") {
    detail::require_arity(step, in, 1);
    const int64_t axis = a.integer("axis"), start = a.integer("start"), end = a.integer("end");
    out = slice(in[0], axis, start, end, a.integer("step", 1));
  } else if (op == "softmax" || op == "log_softmax") {
    detail::require_arity(step, in, 1);
    const int64_t axis = a.integer("axis", -1);
    out = op == "softmax" ? softmax(in[0], axis) : log_softmax(in[0], axis);
  } else if (op == "sparse_softmax_cross_entropy") {
    detail::require_arity(step, in, 2);
    out = sparse_softmax_cross_entropy(in[0], in[1]);
  } else if (op == "layer_norm") {
    detail::require_arity(step, in, 3);
    out = layer_norm(in[0], in[1], in[2], a.number("eps", 1e-5));
  } else if (op == "embedding") {
    detail::require_arity(step, in, 2);
    out = embedding(in[0], in[1]);
  } else if (op == "conv2d") {
    detail::require_arity(step, in, 2);
    a.nhwc();
    const auto strides = a.pair("strides", std::array<int64_t, 2>{1, 1});
    out = conv2d(in[0], in[1], strides, a.padding());
  } else if (op == "max_pool2d" || op == "avg_pool2d") {
    detail::require_arity(step, in, 1);
    a.nhwc();
    const auto window = a.pair("window");
    const auto strides = a.pair("strides", window);
    const Padding padding = a.padding();
    out = op == "max_pool2d" ? max_pool2d(in[0], window, strides, padding)
                             : avg_pool2d(in[0], window, strides, padding);
  } else {
    fail("unknown op '", op, "'");
  }
  a.finish();
  return out;
}

// Runs the program on `env` (the case's inputs, or the caller's tensors for them, e.g.
// watched by a tape) and returns every bound name: inputs and step outputs.
inline std::map<std::string, Tensor> run_program(const Case& c, std::map<std::string, Tensor> env) {
  STRATA_CHECK(c.kind == "graph", "golden case '", c.name, "': run_program needs a graph case, got '",
               c.kind, "'");
  for (size_t i = 0; i < c.program.size(); ++i) {
    const Step& s = c.program[i];
    std::vector<Tensor> in;
    for (const std::string& n : s.in) {
      auto it = env.find(n);
      STRATA_CHECK(it != env.end(), "golden case '", c.name, "', step ", i, " (", s.op,
                   "): unknown input name '", n, "'");
      in.push_back(it->second);
    }
    try {
      env[s.out] = apply_step(s, in);
    } catch (const Error& e) {
      fail("golden case '", c.name, "', step ", i, " ('", s.out, "' = ", s.op, "): ", e.what());
    }
  }
  return env;
}

inline std::map<std::string, Tensor> run_program(const Case& c) {
  std::map<std::string, Tensor> env;
  for (const auto& [name, input] : c.inputs) env[name] = input.value;
  return run_program(c, std::move(env));
}

// "" when every element of `got` is within tol of `want` (|got-want| <= atol + rtol*|want|,
// NaN matching NaN, infinities matching exactly), else a description of the mismatch.
inline std::string compare(const Tensor& got, const Tensor& want, Tolerance tol) {
  if (!got.defined()) return "result is undefined";
  if (got.shape() != want.shape()) {
    return "shape " + shape_str(got.shape()) + ", expected " + shape_str(want.shape());
  }
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (std::isnan(w[i])) {
      ok = std::isnan(g[i]);
    } else if (std::isinf(w[i])) {
      ok = g[i] == w[i];
    } else {
      const double err = std::abs(g[i] - w[i]);
      ok = err <= tol.atol + tol.rtol * std::abs(w[i]);
      if (!ok || std::isnan(err)) worst = std::max(worst, std::isnan(err) ? std::numeric_limits<double>::infinity() : err);
    }
    if (!ok) {
      if (first < 0) first = int64_t(i);
      ++bad;
    }
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os << bad << " of " << g.size() << " elements differ (max abs error " << worst
     << "); first at flat index " << first << ": got " << g[size_t(first)] << ", expected "
     << w[size_t(first)];
  return os.str();
}

}  // namespace strata::golden
