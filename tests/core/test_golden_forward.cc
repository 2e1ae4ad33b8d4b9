// Forward-only run of every graph case in ../shared/golden/cases (README there): each
// program is executed with strata's ops in the case's dtype and every `expect.values`
// entry compared within the case's tolerance. Gradients are autograd's to check. The ops
// the cases run must all have an entry in the op-info table (tests/op_info).
#include <set>

#include "tests/core/core_test_helpers.h"
#include "tests/core/golden_program.h"
#include "tests/op_info/op_info.h"
#include "tests/op_info/recorded_ops.h"

using namespace strata;
using Catch::Matchers::Contains;

namespace {

std::filesystem::path golden_dir() {
  const auto shared = testing::shared_dir();
  return shared.empty() ? shared : shared / "golden" / "cases";
}

golden::Case parse(const char* text) { return golden::parse_case(golden::json::parse(text)); }

}  // namespace

TEST_CASE("golden: every graph case's forward values match", "[golden]") {
  const auto dir = golden_dir();
  if (dir.empty() || !std::filesystem::exists(dir)) {
    WARN("skipped: no golden cases (testing::shared_dir() is empty)");
    return;
  }
  const auto files = golden::case_files(dir);
  REQUIRE_FALSE(files.empty());
  int graphs = 0, values = 0;
  for (const auto& path : files) {
    INFO(path.filename().string());
    const golden::Case c = golden::load_case(path);
    if (c.kind != "graph") continue;
    ++graphs;
    // Inputs carry the case's dtype (and int64 for labels/ids).
    for (const auto& [name, in] : c.inputs) {
      CHECK((is_integral(in.value.dtype()) || in.value.dtype() == dtype_from_name(c.dtype)));
    }
    std::map<std::string, Tensor> env;
    REQUIRE_NOTHROW(env = golden::run_program(c));
    REQUIRE(env.count(c.target));
    CHECK(env.at(c.target).numel() == 1);
    REQUIRE_FALSE(c.expect_values.empty());
    for (const auto& [name, want] : c.expect_values) {
      INFO("value '" << name << "'");
      REQUIRE(env.count(name));
      const Tensor& got = env.at(name);
      CHECK(got.dtype() == dtype_from_name(c.dtype));  // computed in the case's dtype
      const std::string mismatch = golden::compare(got, want, c.tol);
      CHECK(mismatch == "");
      ++values;
    }
  }
  CHECK(graphs >= 60);
  CHECK(values >= graphs);
}

TEST_CASE("golden: every op the cases run has an op-info entry", "[golden][op_info]") {
  const auto dir = golden_dir();
  if (dir.empty() || !std::filesystem::exists(dir)) {
    WARN("skipped: no golden cases (testing::shared_dir() is empty)");
    return;
  }
  // The op ids a case runs, seen through the recording hook: a composite step such as
  // "mean" or "embedding" counts as the ops it is made of.
  std::set<OpId> run_by_cases;
  std::set<std::string> step_names;
  for (const auto& path : golden::case_files(dir)) {
    const golden::Case c = golden::load_case(path);
    if (c.kind != "graph") continue;
    INFO(path.filename().string());
    for (const golden::Step& step : c.program) step_names.insert(step.op);
    testing::RecordedOps recorded;
    REQUIRE_NOTHROW(golden::run_program(c));
    run_by_cases.insert(recorded.ops().begin(), recorded.ops().end());
  }
  REQUIRE_FALSE(run_by_cases.empty());
  for (const std::string& name : step_names) {
    OpId id{};
    if (!op_from_name(name.c_str(), &id)) continue;  // a composite (mean, embedding)
    INFO("golden op '" << name << "'");
    CHECK(testing::find_op_info(id) != nullptr);
  }
  for (OpId id : run_by_cases) {
    INFO("op '" << op_name(id) << "', run by a golden case");
    CHECK(testing::find_op_info(id) != nullptr);
  }
  // Information, not a failure: the ops whose values no golden case reaches.
  std::string uncovered;
  int n = 0;
  for (const testing::OpInfo& info : testing::op_infos()) {
    if (run_by_cases.count(info.op)) continue;
    uncovered += (n++ ? ", " : "") + std::string(info.name());
  }
  WARN(n << " of " << testing::op_infos().size() << " op-info entries are run by no golden case: " << uncovered);
}

TEST_CASE("golden: loading a case", "[golden]") {
  const golden::Case c = parse(R"({
    "kind": "graph", "name": "t", "dtype": "float64",
    "inputs": {"x": {"shape": [2, 2], "dtype": "float64", "data": [1, 2, 3, 4], "grad": true},
               "ids": {"shape": [2], "dtype": "int64", "data": [1, 0], "grad": false}},
    "program": [{"out": "y", "op": "embedding", "in": ["x", "ids"]},
                {"out": "s", "op": "sum", "in": ["y"], "attrs": {"axes": null, "keepdims": false}}],
    "target": "s",
    "expect": {"values": {"s": {"shape": [], "dtype": "float64", "data": [10]}},
               "grads": {"x": {"shape": [2, 2], "dtype": "float64", "data": [1, 1, 1, 1]}}},
    "tol": {"rtol": 1e-9, "atol": 1e-12}})");
  CHECK(c.name == "t");
  CHECK(c.kind == "graph");
  CHECK(c.dtype == "float64");
  CHECK(c.inputs.at("x").grad);
  CHECK_FALSE(c.inputs.at("ids").grad);
  CHECK(c.inputs.at("x").value.dtype() == kFloat64);
  CHECK(c.inputs.at("ids").value.dtype() == kInt64);
  CHECK(c.inputs.at("ids").value.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  REQUIRE(c.program.size() == 2);
  CHECK(c.program[1].attrs.at("axes").is_null());
  CHECK(c.target == "s");
  CHECK(c.expect_grads.at("x").shape() == Shape{2, 2});
  CHECK(c.tol.rtol == 1e-9);
  auto env = golden::run_program(c);
  CHECK(env.at("y").to_vector<double>() == std::vector<double>{3, 4, 1, 2});
  CHECK(golden::compare(env.at("s"), c.expect_values.at("s"), c.tol) == "");
  // Running on caller-provided tensors (as a tape-watching runner does).
  auto env2 = golden::run_program(c, {{"x", full({2, 2}, 1.0, kFloat64)}, {"ids", c.inputs.at("ids").value}});
  CHECK(env2.at("s").item<double>() == 4.0);

  const golden::Case opt = parse(R"({
    "kind": "optimizer", "name": "o", "optimizer": "sgd", "hparams": {"lr": 0.1}, "dtype": "float64",
    "param": {"shape": [2], "data": [1, 2]}, "grads": [{"shape": [2], "data": [0.5, 0.5]}],
    "expect": {"params_after_each_step": [{"shape": [2], "data": [0.95, 1.95]}]},
    "tol": {"rtol": 1e-9, "atol": 1e-11}})");
  CHECK(opt.optimizer == "sgd");
  CHECK(opt.hparams.at("lr") == 0.1);
  CHECK(opt.param.dtype() == kFloat64);
  REQUIRE(opt.grads.size() == 1);
  REQUIRE(opt.expect_params_after_step.size() == 1);
  REQUIRE_THROWS_WITH(golden::run_program(opt), Contains("run_program needs a graph case, got 'optimizer'"));
}

TEST_CASE("golden: unsupported ops, attrs and inputs fail loudly", "[golden][errors]") {
  auto one_step = [](const std::string& step) {
    return parse(("{\"kind\": \"graph\", \"inputs\": {\"x\": {\"shape\": [2, 3], \"dtype\": \"float32\","
                  " \"data\": [1, 2, 3, 4, 5, 6]}}, \"program\": [" + step +
                  "], \"target\": \"y\", \"expect\": {}}").c_str());
  };
  REQUIRE_THROWS_AS(golden::run_program(one_step(R"({"out": "y", "op": "frobnicate", "in": ["x"]})")), Error);
  REQUIRE_THROWS_WITH(golden::run_program(one_step(R"({"out": "y", "op": "frobnicate", "in": ["x"]})")),
                      Contains("unknown op 'frobnicate'"));
  REQUIRE_THROWS_WITH(golden::run_program(one_step(R"({"out": "y", "op": "sum", "in": ["x"], "attrs": {"axis": 0}})")),
                      Contains("unknown attr 'axis' for op 'sum'"));
  REQUIRE_THROWS_WITH(golden::run_program(one_step(R"({"out": "y", "op": "relu", "in": ["x"], "attrs": {"alpha": 0.1}})")),
                      Contains("unknown attr 'alpha' for op 'relu'"));
  REQUIRE_THROWS_WITH(golden::run_program(one_step(R"({"out": "y", "op": "gelu", "in": ["x"], "attrs": {"approximate": "erf"}})")),
                      Contains("attr 'approximate' of op 'gelu': expected \"none\" or \"tanh\", got \"erf\""));
  REQUIRE_THROWS_WITH(golden::run_program(one_step(R"({"out": "y", "op": "reshape", "in": ["x"]})")),
                      Contains("op 'reshape': missing attr 'shape'"));
  REQUIRE_THROWS_WITH(golden::run_program(one_step(R"({"out": "y", "op": "add", "in": ["x"]})")),
                      Contains("op 'add' expects 2 inputs, got 1"));
  REQUIRE_THROWS_WITH(golden::run_program(one_step(R"({"out": "y", "op": "add", "in": ["x", "z"]})")),
                      Contains("unknown input name 'z'"));
  REQUIRE_THROWS_WITH(golden::run_program(one_step(R"({"out": "y", "op": "max_pool2d", "in": ["x"], "attrs": {"window": [1, 1], "data_format": "NCHW"}})")),
                      Contains("attr 'data_format' of op 'max_pool2d': only \"NHWC\" is supported"));
  REQUIRE_THROWS_WITH(golden::run_program(one_step(R"({"out": "y", "op": "conv2d", "in": ["x", "x"], "attrs": {"padding": "FULL"}})")),
                      Contains("attr 'padding' of op 'conv2d': expected \"SAME\" or \"VALID\", got \"FULL\""));
  REQUIRE_THROWS_WITH(golden::run_program(one_step(R"({"out": "y", "op": "transpose", "in": ["x"], "attrs": {"perm": "10"}})")),
                      Contains("attr 'perm' of op 'transpose': expected a list of integers"));
  // Errors from the op itself keep their strata message, prefixed with the step.
  REQUIRE_THROWS_WITH(golden::run_program(one_step(R"({"out": "y", "op": "matmul", "in": ["x", "x"]})")),
                      Contains("step 0 ('y' = matmul): matmul: inner dimensions differ: [2,3] @ [2,3]"));
  REQUIRE_THROWS_WITH(parse(R"({"kind": "graph"})"), Contains("missing field 'expect'"));
  REQUIRE_THROWS_WITH(parse(R"({"kind": "weird", "expect": {}})"), Contains("unknown case kind 'weird'"));
  REQUIRE_THROWS_WITH(golden::load_case("/nonexistent/case.json"), Contains("golden: cannot open case file"));
}

TEST_CASE("golden: compare applies atol + rtol * |want| elementwise", "[golden]") {
  const golden::Tolerance tol{1e-3, 1e-6};
  Tensor want = Tensor::from_vector(std::vector<double>{1, 100, NAN, INFINITY});
  CHECK(golden::compare(tensor({1.0005f, 100.09f, NAN, INFINITY}), want, tol) == "");
  const std::string bad = golden::compare(tensor({1.002f, 100.0f, 0.0f, INFINITY}), want, tol);
  CHECK_THAT(bad, Contains("2 of 4 elements differ"));
  CHECK_THAT(bad, Contains("first at flat index 0"));
  CHECK_THAT(golden::compare(tensor({1, 100, NAN, -INFINITY}), want, tol), Contains("1 of 4 elements differ"));
  CHECK_THAT(golden::compare(tensor({1, 2}), want, tol), Contains("shape [2], expected [4]"));
  CHECK_THAT(golden::compare(Tensor(), want, tol), Contains("undefined"));
}

TEST_CASE("golden: the op vocabulary maps to strata's ops", "[golden]") {
  auto run = [](const std::string& op, const std::string& attrs, std::vector<Tensor> in) {
    golden::Step s;
    s.op = op;
    s.out = "y";
    s.attrs = golden::json::parse(attrs);
    return golden::apply_step(s, in);
  };
  Tensor x = testing::rand_tensor({2, 3, 4}, 900, 0.5, 2);
  CHECK(testing::identical(run("sum", R"({"axes": [0, 2], "keepdims": true})", {x}), sum(x, std::vector<int64_t>{0, 2}, true)));
  CHECK(testing::identical(run("mean", R"({"axes": 1})", {x}), mean(x, std::vector<int64_t>{1})));
  CHECK(testing::identical(run("logsumexp", R"({"axes": null})", {x}), logsumexp(x)));
  CHECK(testing::identical(run("transpose", R"({"perm": [2, 0, 1]})", {x}), permute(x, {2, 0, 1})));
  CHECK(testing::identical(run("transpose", "{}", {x}), x.transpose()));
  CHECK(testing::identical(run("slice", R"({"axis": 2, "start": 1, "end": 3})", {x}), x.slice(2, 1, 3)));
  CHECK(testing::identical(run("concat", R"({"axis": -1})", {x, x, x}), concat({x, x, x}, -1)));
  CHECK(testing::identical(run("broadcast_to", R"({"shape": [5, 2, 3, 4]})", {x}), x.broadcast_to({5, 2, 3, 4})));
  CHECK(testing::identical(run("gelu", R"({"approximate": "tanh"})", {x}), gelu(x, true)));
  CHECK(testing::identical(run("softmax", R"({"axis": 1})", {x}), softmax(x, 1)));
  CHECK(testing::identical(run("pow", "{}", {x, x}), pow(x, x)));
  Tensor img = testing::rand_tensor({1, 6, 6, 2}, 901);
  Tensor w = testing::rand_tensor({3, 3, 2, 4}, 902);
  CHECK(testing::identical(run("conv2d", R"({"strides": [2, 2], "padding": "SAME", "data_format": "NHWC"})", {img, w}),
                           conv2d(img, w, {2, 2}, Padding::Same)));
  CHECK(testing::identical(run("avg_pool2d", R"({"window": [3, 3], "strides": [1, 1], "padding": "VALID"})", {img}),
                           avg_pool2d(img, {3, 3}, {1, 1}, Padding::Valid)));
  CHECK(testing::identical(run("max_pool2d", R"({"window": [2, 2]})", {img}), max_pool2d(img, {2, 2}, {2, 2})));
}
