// The op-info table (tests/op_info/op_info.h) against the library: an entry for every op,
// every sample run in every listed dtype with the outputs it promises, exactly the listed
// dtypes accepted, low-precision results close to float64, the same results on another
// logical device, differentiability as the gradient registry marks it, and every
// differentiable op's gradient checked by finite differences in float64.
#include <algorithm>
#include <cmath>
#include <sstream>

#include <strata/autograd/autograd.h>
#include <strata/core/ops.h>
#include "tests/op_info/op_info.h"
#include "tests/op_info/recorded_ops.h"
#include "tests/test_util.h"

using namespace strata;
using namespace strata::testing;

namespace {

const std::vector<DType> kEveryDType = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};

std::string describe(const OpInfo& info, DType dtype, const OpSample& s) {
  std::ostringstream os;
  os << info.name() << " " << dtype << ": " << s.description;
  return os.str();
}

// Runs the sample, turning any exception into a test failure (and an empty result).
std::vector<Tensor> run_checked(const OpInfo& info, DType dtype, const OpSample& s,
                                const std::vector<Tensor>& inputs) {
  try {
    return s.run(inputs);
  } catch (const std::exception& e) {
    FAIL_CHECK(describe(info, dtype, s) << ": threw " << e.what());
  }
  return {};
}

bool has_floating_input(const OpSample& s) {
  return std::any_of(s.inputs.begin(), s.inputs.end(),
                     [](const Tensor& t) { return is_floating(t.dtype()); });
}

}  // namespace

TEST_CASE("op info: every op id has exactly one entry", "[op_info]") {
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    INFO("op " << i << " (" << op_name(op) << ")");
    const OpInfo* info = find_op_info(op);
    if (info == nullptr) {
      FAIL_CHECK("the op-info table (tests/op_info) has no entry for it: add one");
      continue;
    }
    CHECK(info->op == op);
    CHECK_FALSE(info->dtypes.empty());
    CHECK(static_cast<bool>(info->build));
  }
  const auto& table = op_infos();
  CHECK(table.size() == size_t(kNumOps));
  for (size_t i = 1; i < table.size(); ++i) {
    INFO("two entries for " << table[i].name());
    CHECK(table[i - 1].op != table[i].op);
  }
}

TEST_CASE("op info: every sample runs in every listed dtype with the promised outputs", "[op_info]") {
  int samples_run = 0;
  for (const OpInfo& info : op_infos()) {
    bool some_input = false, some_view = false;
    for (DType dt : info.dtypes) {
      const std::vector<OpSample> samples = info.samples(dt);
      INFO(info.name() << " in " << dt);
      CHECK_FALSE(samples.empty());
      for (const OpSample& s : samples) {
        INFO(describe(info, dt, s));
        for (size_t k = 0; k < s.inputs.size(); ++k) {
          INFO("input " << k);
          CHECK(s.inputs[k].device() == Device());
          // (An empty tensor reports non-contiguous: Tensor::is_contiguous and
          // contiguous_strides disagree on zero extents.)
          CHECK((s.inputs[k].is_contiguous() || s.inputs[k].numel() == 0));
          CHECK(check_domain(s.inputs[k], info.domain(k)) == "");
        }
        some_input = some_input || !s.inputs.empty();
        RecordedOps recorded;
        const std::vector<Tensor> out = run_checked(info, dt, s, s.inputs);
        if (out.empty()) continue;
        ++samples_run;
        if (info.recorded) CHECK(recorded.contains(info.op));
        some_view = some_view || recorded.contains(OpId::Permute) || recorded.contains(OpId::Slice) ||
                    recorded.contains(OpId::BroadcastTo);
        REQUIRE(s.output_shapes.size() == s.output_dtypes.size());
        REQUIRE(out.size() == s.output_shapes.size());
        for (size_t i = 0; i < out.size(); ++i) {
          INFO("output " << i);
          REQUIRE(out[i].defined());
          CHECK(shape_str(out[i].shape()) == shape_str(s.output_shapes[i]));
          CHECK(out[i].dtype() == s.output_dtypes[i]);
          if (is_floating(out[i].dtype())) {
            // Inputs are within the op's domain, so the results are finite.
            const std::vector<double> v = out[i].to_vector<double>();
            CHECK(std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); }));
          }
        }
      }
    }
    // An op that reads tensors must also be run on non-contiguous ones.
    INFO(info.name() << ": no sample passes a transposed, sliced or broadcast operand");
    CHECK((!some_input || some_view));
  }
  CHECK(samples_run > 1000);
}

TEST_CASE("op info: dtypes an entry does not list are refused with strata::Error", "[op_info]") {
  for (const OpInfo& info : op_infos()) {
    for (DType dt : kEveryDType) {
      if (info.supports(dt)) continue;
      for (const OpSample& s : info.samples(dt)) {
        INFO(describe(info, dt, s) << ": ran, so the entry should list " << dt
                                   << " (or the op should refuse it)");
        bool refused = false;
        try {
          s.run();
        } catch (const Error&) {
          refused = true;
        }
        CHECK(refused);
      }
    }
  }
}

TEST_CASE("op info: float32, float16 and bfloat16 results match float64 within the entry's tolerance",
          "[op_info]") {
  int compared = 0;
  for (const OpInfo& info : op_infos()) {
    if (!info.supports(kFloat64)) continue;
    for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
      if (!info.supports(dt)) continue;
      for (const OpSample& s : info.samples(dt)) {
        // The same values in float64 (exactly: float64 holds every value of the narrower
        // types) through the same call; samples without float inputs have nothing to widen.
        if (!has_floating_input(s)) continue;
        INFO(describe(info, dt, s));
        std::vector<Tensor> wide;
        for (const Tensor& t : s.inputs) wide.push_back(is_floating(t.dtype()) ? t.cast(kFloat64) : t);
        const std::vector<Tensor> got = run_checked(info, dt, s, s.inputs);
        const std::vector<Tensor> want = run_checked(info, kFloat64, s, wide);
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          INFO("output " << i);
          const bool floating = is_floating(got[i].dtype());
          const Tensor g = floating ? got[i].cast(kFloat64) : got[i];
          const Tensor w = floating ? want[i].cast(kFloat64) : want[i];
          CHECK(mismatch(g, w, floating ? info.tolerance(dt) : Tolerance{}) == "");
        }
        ++compared;
      }
    }
  }
  CHECK(compared > 300);
}

TEST_CASE("op info: samples moved to cpu:1 give cpu:0's results there", "[op_info]") {
  const Device other = cpu(1);
  for (const OpInfo& info : op_infos()) {
    for (DType dt : info.dtypes) {
      const std::vector<OpSample> here = info.samples(dt), there = info.samples(dt, other);
      REQUIRE(here.size() == there.size());
      for (size_t k = 0; k < here.size(); ++k) {
        INFO(describe(info, dt, there[k]));
        for (const Tensor& t : there[k].inputs) CHECK(t.device() == other);
        const std::vector<Tensor> want = run_checked(info, dt, here[k], here[k].inputs);
        const std::vector<Tensor> got = run_checked(info, dt, there[k], there[k].inputs);
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          INFO("output " << i);
          CHECK(got[i].device() == other);
          CHECK(mismatch(got[i], want[i], info.tolerance(dt)) == "");
        }
      }
    }
  }
}

TEST_CASE("op info: differentiability agrees with the gradient registry", "[op_info]") {
  for (const OpInfo& info : op_infos()) {
    INFO(info.name());
    const autograd::GradientDef* def = autograd::find_gradient(info.op);
    REQUIRE(def != nullptr);
    CHECK(def->differentiable == info.differentiable);
  }
}

TEST_CASE("op info: gradients of differentiable ops match finite differences in float64",
          "[op_info][gradcheck]") {
  for (const OpInfo& info : op_infos()) {
    if (!info.differentiable) continue;
    {
      INFO(info.name() << ": a differentiable entry must list float64, for gradcheck");
      REQUIRE(info.supports(kFloat64));
    }
    int checked = 0;
    for (const OpSample& s : info.samples(kFloat64)) {
      if (!s.gradcheck || !has_floating_input(s) || !is_floating(s.output_dtypes.at(0))) continue;
      autograd::GradcheckResult r;
      try {
        r = autograd::gradcheck([&s](const std::vector<Tensor>& xs) { return s.run(xs).at(0); }, s.inputs,
                                info.gradcheck);
      } catch (const std::exception& e) {
        r.ok = false;
        r.message = std::string("threw ") + e.what();
      }
      INFO(describe(info, kFloat64, s) << ": " << r.message << " (max |error| " << r.max_abs_error << ")");
      CHECK(r.ok);
      ++checked;
    }
    INFO(info.name() << " has no float64 sample that gradcheck can use");
    CHECK(checked > 0);
  }
}
