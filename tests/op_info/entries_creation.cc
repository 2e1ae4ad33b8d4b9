// Op-info entries of the ops that make tensors from scalars (fill, ranges, eye), the random
// ops, and the fused optimizer updates. None is differentiable.
#include <strata/core/random.h>
#include "tests/op_info/entries.h"

namespace strata::testing {

using namespace entries;

namespace {

OpInfo creation(OpId op, std::vector<DType> dtypes, SampleBuilder build) {
  OpInfo e;
  e.op = op;
  e.dtypes = std::move(dtypes);
  e.differentiable = false;
  e.domains = {Domain::Any};
  e.build = std::move(build);
  return e;
}

using Make = std::function<Tensor()>;

// A sample with no inputs: the tensor lands on the sample's device (made current by run).
OpSample made(std::string description, Make f, Shape shape, DType dtype) {
  return make_sample(
      std::move(description), {}, [f = std::move(f)](const std::vector<Tensor>&) { return f(); },
      std::move(shape), dtype);
}

std::vector<OpSample> fill_samples(SampleMaker& m) {
  const DType dt = m.dtype();
  return {
      made(
          "full [3,4] with 1.5",
          [dt] {
            return full({3, 4}, 1.5, dt);
          },
          {3, 4}, dt),
      made(
          "full rank 0 with -2", [dt] { return full({}, -2.0, dt); }, {}, dt),
      made(
          "zeros [2,3,4]",
          [dt] {
            return zeros({2, 3, 4}, dt);
          },
          {2, 3, 4}, dt),
      made(
          "ones [5]", [dt] { return ones({5}, dt); }, {5}, dt),
      made(
          "full [2,0]",
          [dt] {
            return full({2, 0}, 3.0, dt);
          },
          {2, 0}, dt),
      make_sample(
          "full_like [2,3] with 7", {m.input(0, {2, 3})},
          [](const std::vector<Tensor>& x) { return full_like(x[0], 7.0); }, {2, 3}, dt),
      make_sample(
          "full_like transposed [2,3] with -1", {m.input(0, {2, 3})},
          [](const std::vector<Tensor>& x) {
            return full_like(transpose(x[0], {1, 0}), -1.0);
          },
          {3, 2}, dt),
  };
}

std::vector<OpSample> arange_samples(SampleMaker& m) {
  const DType dt = m.dtype();
  return {
      made(
          "arange(0, 5)", [dt] { return arange(0, 5, 1, dt); }, {5}, dt),
      made(
          "arange(1, 2, 0.25)", [dt] { return arange(1, 2, 0.25, dt); }, {4}, dt),
      made(
          "arange(5, -1, -2)", [dt] { return arange(5, -1, -2, dt); }, {3}, dt),
      made(
          "arange(3, 3) (empty)", [dt] { return arange(3, 3, 1, dt); }, {0}, dt),
  };
}

std::vector<OpSample> linspace_samples(SampleMaker& m) {
  const DType dt = m.dtype();
  return {
      made(
          "linspace(0, 1, 5)", [dt] { return linspace(0, 1, 5, dt); }, {5}, dt),
      made(
          "linspace(-1, 3, 9)", [dt] { return linspace(-1, 3, 9, dt); }, {9}, dt),
      made(
          "linspace(2, -2, 1)", [dt] { return linspace(2, -2, 1, dt); }, {1}, dt),
      made(
          "linspace(0, 1, 0) (empty)", [dt] { return linspace(0, 1, 0, dt); }, {0}, dt),
  };
}

std::vector<OpSample> eye_samples(SampleMaker& m) {
  const DType dt = m.dtype();
  return {
      made(
          "eye(3)", [dt] { return eye(3, dt); }, {3, 3}, dt),
      made(
          "eye(1)", [dt] { return eye(1, dt); }, {1, 1}, dt),
      made(
          "eye(0)", [dt] { return eye(0, dt); }, {0, 0}, dt),
  };
}

// Ranks 0 to 3 and an empty shape, each with its own seed.
SampleBuilder random_samples(std::string what,
                             std::function<Tensor(const Shape&, uint64_t seed, DType)> draw_fn) {
  return [what, draw_fn](SampleMaker& m) {
    const DType dt = m.dtype();
    std::vector<OpSample> samples;
    for (const Shape& s : std::vector<Shape>{{}, {7}, {3, 4}, {2, 3, 4}, {0}}) {
      const uint64_t seed = m.next_seed();
      samples.push_back(made(
          what + " " + str(s), [=] { return draw_fn(s, seed, dt); }, s, dt));
    }
    return samples;
  };
}

// The updates write their targets in place, so each call updates fresh copies of the
// sample's param and slots and returns them (param first, then the slots).
OpInfo sgd_update_entry() {
  OpInfo e = creation(OpId::SgdUpdate, kFloatTypes, nullptr);
  e.recorded = false;  // in-place updates are not recorded
  e.build = [](SampleMaker& m) {
    auto step = [](SgdAttrs attrs, bool transposed_grad) {
      return [attrs, transposed_grad](const std::vector<Tensor>& x) {
        const Tensor param = x[0].clone();
        const Tensor grad = transposed_grad ? transpose(x[1], {1, 0}) : x[1];
        const Tensor buf = x.size() > 2 ? x[2].clone() : Tensor();
        sgd_update(param, grad, buf, attrs);
        return buf.defined() ? std::vector<Tensor>{param, buf} : std::vector<Tensor>{param};
      };
    };
    const DType dt = m.dtype();
    std::vector<OpSample> samples;
    auto add = [&](std::string what, std::vector<Tensor> in, SgdAttrs attrs, bool transposed,
                   const Shape& shape) {
      const size_t outputs = in.size() > 2 ? 2 : 1;  // param, and the momentum buffer if any
      samples.push_back(
          make_sample(std::move(what), std::move(in), step(attrs, transposed), outputs, shape, dt));
    };
    add("plain [3,4] lr 0.1", {m.input(0, {3, 4}), m.input(1, {3, 4})}, SgdAttrs{0.1, 0.0, 0.0, false}, false,
        {3, 4});
    add("momentum 0.9 [5]", {m.input(0, {5}), m.input(1, {5}), m.input(2, {5})},
        SgdAttrs{0.1, 0.9, 0.0, false}, false, {5});
    add("Nesterov with weight decay [2,3,4]",
        {m.input(0, {2, 3, 4}), m.input(1, {2, 3, 4}), m.input(2, {2, 3, 4})},
        SgdAttrs{0.05, 0.8, 0.01, true}, false, {2, 3, 4});
    add("rank 0 with momentum", {m.input(0, {}), m.input(1, {}), m.input(2, {})},
        SgdAttrs{0.1, 0.5, 0.0, false}, false, {});
    add("transposed gradient [4,3]", {m.input(0, {3, 4}), m.input(1, {4, 3})}, SgdAttrs{0.1, 0.0, 0.1, false},
        true, {3, 4});
    return samples;
  };
  return e;
}

OpInfo adam_update_entry() {
  OpInfo e = creation(OpId::AdamUpdate, kFloatTypes, nullptr);
  e.recorded = false;  // in-place updates are not recorded
  // param, grad, m, and v: a second moment, so positive.
  e.domains = {Domain::Any, Domain::Any, Domain::Any, Domain::Positive};
  e.build = [](SampleMaker& m) {
    auto step = [](AdamAttrs attrs, bool transposed_grad) {
      return [attrs, transposed_grad](const std::vector<Tensor>& x) {
        const Tensor param = x[0].clone(), mom = x[2].clone(), vel = x[3].clone();
        adam_update(param, transposed_grad ? transpose(x[1], {1, 0}) : x[1], mom, vel, attrs);
        return std::vector<Tensor>{param, mom, vel};
      };
    };
    const DType dt = m.dtype();
    std::vector<OpSample> samples;
    auto add = [&](std::string what, const Shape& shape, const Shape& grad_shape, AdamAttrs attrs,
                   bool transposed) {
      samples.push_back(make_sample(
          std::move(what), {m.input(0, shape), m.input(1, grad_shape), m.input(2, shape), m.input(3, shape)},
          step(attrs, transposed), 3, shape, dt));
    };
    AdamAttrs adam{0.01, 0.9, 0.999, 1e-7, 0.01, /*decoupled=*/false, /*step=*/1};
    AdamAttrs adamw{0.01, 0.9, 0.99, 1e-3, 0.1, /*decoupled=*/true, /*step=*/3};
    add("Adam with L2 [3,4] step 1", {3, 4}, {3, 4}, adam, false);
    add("AdamW [2,3,4] step 3", {2, 3, 4}, {2, 3, 4}, adamw, false);
    add("AdamW rank 0", {}, {}, adamw, false);
    add("Adam with a transposed gradient [4,3]", {3, 4}, {4, 3}, adam, true);
    return samples;
  };
  return e;
}

OpInfo all_finite_entry() {
  OpInfo e = creation(OpId::AllFinite, kAllTypes, nullptr);
  e.domains = {Domain::Any, Domain::Any, Domain::WithNonFinite};
  e.build = [](SampleMaker& m) {
    auto check = [](const std::vector<Tensor>& x) { return all_finite(x); };
    std::vector<OpSample> samples = {
        make_sample("[3,4] and [5]", {m.input(0, {3, 4}), m.input(1, {5})}, check, {}, kBool),
        make_sample("rank 0", {m.input(0, {})}, check, {}, kBool),
        make_sample("no tensors", {}, check, {}, kBool),
        make_sample(
            "transposed [4,3] and a step-2 slice of [6]", {m.input(0, {4, 3}), m.input(1, {6})},
            [](const std::vector<Tensor>& x) {
              return all_finite({transpose(x[0], {1, 0}), slice(x[1], 0, 0, 6, 2)});
            },
            {}, kBool),
    };
    if (is_floating(m.dtype())) {
      samples.push_back(make_sample("[2,3], [3] and [4] holding inf, -inf and NaN",
                                    {m.input(0, {2, 3}), m.input(1, {3}), m.input(2, {4})}, check, {},
                                    kBool));
    }
    return samples;
  };
  return e;
}

}  // namespace

void add_creation_entries(std::vector<OpInfo>& t) {
  t.push_back(creation(OpId::Fill, kAllTypes, fill_samples));
  t.push_back(creation(OpId::Arange, kAllTypes, arange_samples));
  t.push_back(creation(OpId::Linspace, kAllTypes, linspace_samples));
  t.push_back(creation(OpId::Eye, kAllTypes, eye_samples));
  t.push_back(creation(OpId::RandomUniform, kFloatTypes,
                       random_samples("uniform in [-1, 2)", [](const Shape& s, uint64_t seed, DType dt) {
                         return random::uniform(s, seed, -1.0, 2.0, dt);
                       })));
  t.push_back(creation(OpId::RandomNormal, kFloatTypes,
                       random_samples("normal(0.5, 2)", [](const Shape& s, uint64_t seed, DType dt) {
                         return random::normal(s, seed, 0.5, 2.0, dt);
                       })));
  t.push_back(creation(OpId::RandomTruncatedNormal, kFloatTypes,
                       random_samples("truncated normal(0, 1)", [](const Shape& s, uint64_t seed, DType dt) {
                         return random::truncated_normal(s, seed, 0.0, 1.0, dt);
                       })));
  t.push_back(creation(OpId::RandomBernoulli, kAllTypes,
                       random_samples("bernoulli(0.3)", [](const Shape& s, uint64_t seed, DType dt) {
                         return random::bernoulli(s, 0.3, seed, dt);
                       })));
  t.push_back(sgd_update_entry());
  t.push_back(adam_update_entry());
  t.push_back(all_finite_entry());
}

}  // namespace strata::testing
