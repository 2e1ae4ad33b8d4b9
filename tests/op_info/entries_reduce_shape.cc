// Op-info entries of the reductions (sum ... cumsum) and of the shape and indexing ops
// (views, concat, pad, gather, scatter_add, one_hot).
#include "tests/op_info/entries.h"

namespace strata::testing {

using namespace entries;

namespace {

using Reduce = std::function<Tensor(const Tensor&, const Axes&, bool)>;

std::string axes_str(const Axes& axes, bool keepdims) {
  std::string s = "axes ";
  if (!axes) {
    s += "all";
  } else {
    s += "{";
    for (size_t i = 0; i < axes->size(); ++i) s += (i ? "," : "") + std::to_string((*axes)[i]);
    s += "}";
  }
  return s + (keepdims ? " keepdims" : "");
}

// Axis lists (all, one, negative, several, none) with and without keepdims, rank 0 and 1,
// and a permuted (non-contiguous) operand. No full reduction of more than 8 elements, so
// that an integer product cannot overflow.
OpInfo reduction(OpId op, Reduce f, std::vector<DType> dtypes, Domain domain, bool differentiable) {
  OpInfo e;
  e.op = op;
  e.dtypes = std::move(dtypes);
  e.differentiable = differentiable;
  e.domains = {domain};
  e.build = [f](SampleMaker& m) {
    struct Case {
      Shape in;
      Axes axes;
      bool keepdims;
      Shape out;
    };
    const std::vector<Case> cases = {
        {{2, 3}, std::nullopt, false, {}},
        {{2, 3}, std::nullopt, true, {1, 1}},
        {{2, 3, 4}, std::vector<int64_t>{0}, false, {3, 4}},
        {{2, 3, 4}, std::vector<int64_t>{-1}, true, {2, 3, 1}},
        {{2, 3, 4}, std::vector<int64_t>{0, 2}, false, {3}},
        {{2, 3, 4}, std::vector<int64_t>{}, false, {2, 3, 4}},
        {{}, std::nullopt, false, {}},
        {{5}, std::vector<int64_t>{0}, true, {1}},
    };
    std::vector<OpSample> samples;
    for (const Case& c : cases) {
      const Axes axes = c.axes;
      const bool keep = c.keepdims;
      samples.push_back(make_sample(
          str(c.in) + " " + axes_str(axes, keep), {m.input(0, c.in)},
          [f, axes, keep](const std::vector<Tensor>& x) { return f(x[0], axes, keep); }, c.out, m.dtype()));
    }
    samples.push_back(make_sample(
        "[2,3,4] permuted to [4,2,3], axes {1}", {m.input(0, {2, 3, 4})},
        [f](const std::vector<Tensor>& x) {
          return f(permute(x[0], {2, 0, 1}), std::vector<int64_t>{1}, false);
        },
        {4, 3}, m.dtype()));
    return samples;
  };
  return e;
}

OpInfo arg_reduction(OpId op, Tensor (*f)(const Tensor&, int64_t, bool)) {
  OpInfo e;
  e.op = op;
  e.dtypes = kAllTypes;
  e.differentiable = false;
  e.domains = {Domain::Grid};  // distinct values: a unique arg-max on every backend
  e.build = [f](SampleMaker& m) {
    auto call = [f](int64_t axis, bool keep) {
      return [f, axis, keep](const std::vector<Tensor>& x) { return f(x[0], axis, keep); };
    };
    return std::vector<OpSample>{
        make_sample("[3,4] axis 0", {m.input(0, {3, 4})}, call(0, false), {4}, kInt64),
        make_sample("[3,4] axis -1 keepdims", {m.input(0, {3, 4})}, call(-1, true), {3, 1}, kInt64),
        make_sample("[2,3,4] axis 1", {m.input(0, {2, 3, 4})}, call(1, false), {2, 4}, kInt64),
        make_sample("[5] axis 0", {m.input(0, {5})}, call(0, false), {}, kInt64),
        make_sample(
            "transposed [4,3] axis 1", {m.input(0, {4, 3})},
            [f](const std::vector<Tensor>& x) {
              return f(transpose(x[0], {1, 0}), 1, false);
            },
            {3}, kInt64),
    };
  };
  return e;
}

OpInfo cumsum_entry() {
  OpInfo e;
  e.op = OpId::Cumsum;
  e.dtypes = kNumericTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.build = [](SampleMaker& m) {
    auto call = [](int64_t axis, bool exclusive, bool reverse) {
      return [=](const std::vector<Tensor>& x) { return cumsum(x[0], axis, exclusive, reverse); };
    };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("[3,4] axis 0", {m.input(0, {3, 4})}, call(0, false, false), {3, 4}, dt),
        make_sample("[3,4] axis 1 exclusive", {m.input(0, {3, 4})}, call(1, true, false), {3, 4}, dt),
        make_sample("[3,4] axis -1 reverse", {m.input(0, {3, 4})}, call(-1, false, true), {3, 4}, dt),
        make_sample("[3,4] axis 0 exclusive reverse", {m.input(0, {3, 4})}, call(0, true, true), {3, 4}, dt),
        make_sample("[5] axis 0", {m.input(0, {5})}, call(0, false, false), {5}, dt),
        make_sample("[2,3,4] axis 1", {m.input(0, {2, 3, 4})}, call(1, false, false), {2, 3, 4}, dt),
        make_sample(
            "transposed [4,3] axis 1 exclusive", {m.input(0, {4, 3})},
            [](const std::vector<Tensor>& x) {
              return cumsum(transpose(x[0], {1, 0}), 1, true);
            },
            {3, 4}, dt),
    };
  };
  return e;
}

// reshape also covers expand_dims and squeeze, which are recorded as reshapes.
OpInfo reshape_entry() {
  OpInfo e;
  e.op = OpId::Reshape;
  e.dtypes = kAllTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.build = [](SampleMaker& m) {
    auto to = [](Shape s) { return [s](const std::vector<Tensor>& x) { return reshape(x[0], s); }; };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("[2,3,4] to [4,-1]", {m.input(0, {2, 3, 4})}, to({4, -1}), {4, 6}, dt),
        make_sample("[6] to [2,3]", {m.input(0, {6})}, to({2, 3}), {2, 3}, dt),
        make_sample("rank 0 to [1,1]", {m.input(0, {})}, to({1, 1}), {1, 1}, dt),
        make_sample("[1] to rank 0", {m.input(0, {1})}, to({}), {}, dt),
        make_sample(
            "transposed [4,3] to [12] (copies)", {m.input(0, {4, 3})},
            [](const std::vector<Tensor>& x) {
              return reshape(transpose(x[0], {1, 0}), {12});
            },
            {12}, dt),
        make_sample(
            "expand_dims([3,4], 1)", {m.input(0, {3, 4})},
            [](const std::vector<Tensor>& x) { return expand_dims(x[0], 1); }, {3, 1, 4}, dt),
        make_sample(
            "squeeze(step-2 slice of [3,1,8], 1)", {m.input(0, {3, 1, 8})},
            [](const std::vector<Tensor>& x) { return squeeze(slice(x[0], 2, 0, 8, 2), 1); }, {3, 4}, dt),
    };
  };
  return e;
}

OpInfo permute_entry() {
  OpInfo e;
  e.op = OpId::Permute;
  e.dtypes = kAllTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.build = [](SampleMaker& m) {
    auto by = [](std::vector<int64_t> p) {
      return [p](const std::vector<Tensor>& x) { return permute(x[0], p); };
    };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("[2,3,4] by {2,0,1}", {m.input(0, {2, 3, 4})}, by({2, 0, 1}), {4, 2, 3}, dt),
        make_sample("[3,4] by {1,0}", {m.input(0, {3, 4})}, by({1, 0}), {4, 3}, dt),
        make_sample("[2,3,4,5] by {3,1,0,2}", {m.input(0, {2, 3, 4, 5})}, by({3, 1, 0, 2}), {5, 3, 2, 4}, dt),
        make_sample("[5] by {0}", {m.input(0, {5})}, by({0}), {5}, dt),
        make_sample("rank 0 by {}", {m.input(0, {})}, by({}), {}, dt),
        make_sample(
            "step-2 slice of [3,8] by {-1,0}", {m.input(0, {3, 8})},
            [](const std::vector<Tensor>& x) {
              return permute(slice(x[0], 1, 0, 8, 2), {-1, 0});
            },
            {4, 3}, dt),
    };
  };
  return e;
}

OpInfo slice_entry() {
  OpInfo e;
  e.op = OpId::Slice;
  e.dtypes = kAllTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.build = [](SampleMaker& m) {
    auto sl = [](int64_t axis, int64_t start, int64_t end, int64_t step) {
      return [=](const std::vector<Tensor>& x) { return slice(x[0], axis, start, end, step); };
    };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("[3,8] axis 1 from 1 to 7 step 2", {m.input(0, {3, 8})}, sl(1, 1, 7, 2), {3, 3}, dt),
        make_sample("[5] from -3", {m.input(0, {5})}, sl(0, -3, 5, 1), {3}, dt),
        make_sample("[2,3,4] axis 2 step 3", {m.input(0, {2, 3, 4})}, sl(2, 0, 4, 3), {2, 3, 2}, dt),
        make_sample("[5] empty range", {m.input(0, {5})}, sl(0, 2, 2, 1), {0}, dt),
        make_sample(
            "transposed [4,3] axis 0 from 1", {m.input(0, {4, 3})},
            [](const std::vector<Tensor>& x) {
              return slice(transpose(x[0], {1, 0}), 0, 1, 3);
            },
            {2, 4}, dt),
    };
  };
  return e;
}

OpInfo broadcast_to_entry() {
  OpInfo e;
  e.op = OpId::BroadcastTo;
  e.dtypes = kAllTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.build = [](SampleMaker& m) {
    auto to = [](Shape s) { return [s](const std::vector<Tensor>& x) { return broadcast_to(x[0], s); }; };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("[3,1] to [2,3,4]", {m.input(0, {3, 1})}, to({2, 3, 4}), {2, 3, 4}, dt),
        make_sample("rank 0 to [2,3]", {m.input(0, {})}, to({2, 3}), {2, 3}, dt),
        make_sample("[4] to [3,4]", {m.input(0, {4})}, to({3, 4}), {3, 4}, dt),
        make_sample(
            "transposed [3,1] to [4,3]", {m.input(0, {3, 1})},
            [](const std::vector<Tensor>& x) {
              return broadcast_to(transpose(x[0], {1, 0}), {4, 3});
            },
            {4, 3}, dt),
    };
  };
  return e;
}

OpInfo concat_entry() {
  OpInfo e;
  e.op = OpId::Concat;
  e.dtypes = kAllTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.build = [](SampleMaker& m) {
    auto along = [](int64_t axis) {
      return [axis](const std::vector<Tensor>& x) { return concat(x, axis); };
    };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("three [2,3] on axis 0", {m.input(0, {2, 3}), m.input(1, {2, 3}), m.input(2, {2, 3})},
                    along(0), {6, 3}, dt),
        make_sample("[2,3] and [2,1] on axis -1", {m.input(0, {2, 3}), m.input(1, {2, 1})}, along(-1), {2, 4},
                    dt),
        make_sample("[2,2,3] and [2,1,3] on axis 1", {m.input(0, {2, 2, 3}), m.input(1, {2, 1, 3})}, along(1),
                    {2, 3, 3}, dt),
        make_sample("[5], [0] and [2]", {m.input(0, {5}), m.input(1, {0}), m.input(2, {2})}, along(0), {7},
                    dt),
        make_sample("one [2,3]", {m.input(0, {2, 3})}, along(1), {2, 3}, dt),
        make_sample(
            "transposed [3,2] and a step-2 slice of [2,6] on axis 0",
            {m.input(0, {3, 2}), m.input(1, {2, 6})},
            [](const std::vector<Tensor>& x) {
              return concat({transpose(x[0], {1, 0}), slice(x[1], 1, 0, 6, 2)}, 0);
            },
            {4, 3}, dt),
    };
  };
  return e;
}

OpInfo pad_entry() {
  OpInfo e;
  e.op = OpId::Pad;
  e.dtypes = kAllTypes;
  e.differentiable = true;
  e.domains = {Domain::Any};
  e.build = [](SampleMaker& m) {
    using Pads = std::vector<std::pair<int64_t, int64_t>>;
    auto by = [](Pads p, double value) {
      return [p, value](const std::vector<Tensor>& x) { return pad(x[0], p, value); };
    };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("[3,4] by {1,2},{0,1} with 1", {m.input(0, {3, 4})}, by({{1, 2}, {0, 1}}, 1.0), {6, 5},
                    dt),
        make_sample("[5] by {2,0}", {m.input(0, {5})}, by({{2, 0}}, 0.0), {7}, dt),
        make_sample("rank 0", {m.input(0, {})}, by({}, 0.0), {}, dt),
        make_sample("[2,0] by {0,1},{1,1}", {m.input(0, {2, 0})}, by({{0, 1}, {1, 1}}, 0.0), {3, 2}, dt),
        make_sample(
            "step-2 slice of [2,3,4] by {0,0},{2,0},{1,1}", {m.input(0, {2, 3, 4})},
            [](const std::vector<Tensor>& x) {
              return pad(slice(x[0], 2, 0, 4, 2), {{0, 0}, {2, 0}, {1, 1}});
            },
            {2, 5, 4}, dt),
    };
  };
  return e;
}

// Indices are drawn within range, int64 and int32, with repeats.
OpInfo gather_entry() {
  OpInfo e;
  e.op = OpId::Gather;
  e.dtypes = kAllTypes;
  e.differentiable = true;
  e.domains = {Domain::Any, Domain::Indices};
  e.build = [](SampleMaker& m) {
    auto along = [](int64_t axis) {
      return [axis](const std::vector<Tensor>& x) { return gather(x[0], x[1], axis); };
    };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("[4,3] by [6] on axis 0", {m.input(0, {4, 3}), m.indices({6}, 4)}, along(0), {6, 3}, dt),
        make_sample("[2,4,3] by int32 [2,3] on axis 1", {m.input(0, {2, 4, 3}), m.indices({2, 3}, 4, kInt32)},
                    along(1), {2, 2, 3, 3}, dt),
        make_sample("[5] by a rank-0 index", {m.input(0, {5}), m.indices({}, 5)}, along(0), {}, dt),
        make_sample(
            "embedding: [5,3] table by [3,2] ids", {m.input(0, {5, 3}), m.indices({3, 2}, 5)},
            [](const std::vector<Tensor>& x) { return embedding(x[0], x[1]); }, {3, 2, 3}, dt),
        make_sample(
            "transposed [4,3] by [5] on axis -1", {m.input(0, {4, 3}), m.indices({5}, 4)},
            [](const std::vector<Tensor>& x) {
              return gather(transpose(x[0], {1, 0}), x[1], -1);
            },
            {3, 5}, dt),
    };
  };
  return e;
}

OpInfo scatter_add_entry() {
  OpInfo e;
  e.op = OpId::ScatterAdd;
  e.dtypes = kNumericTypes;
  e.differentiable = true;
  e.domains = {Domain::Any, Domain::Indices};
  e.build = [](SampleMaker& m) {
    auto into = [](Shape shape, int64_t axis) {
      return [shape, axis](const std::vector<Tensor>& x) { return scatter_add(x[0], x[1], shape, axis); };
    };
    const DType dt = m.dtype();
    return std::vector<OpSample>{
        make_sample("[6,3] by [6] into [4,3] on axis 0", {m.input(0, {6, 3}), m.indices({6}, 4)},
                    into({4, 3}, 0), {4, 3}, dt),
        make_sample("[2,2,3,3] by int32 [2,3] into [2,4,3] on axis 1",
                    {m.input(0, {2, 2, 3, 3}), m.indices({2, 3}, 4, kInt32)}, into({2, 4, 3}, 1), {2, 4, 3},
                    dt),
        make_sample("rank 0 by a rank-0 index into [4]", {m.input(0, {}), m.indices({}, 4)}, into({4}, 0),
                    {4}, dt),
        make_sample(
            "transposed [3,6] by [6] into [4,3]", {m.input(0, {3, 6}), m.indices({6}, 4)},
            [](const std::vector<Tensor>& x) {
              return scatter_add(transpose(x[0], {1, 0}), x[1], {4, 3}, 0);
            },
            {4, 3}, dt),
    };
  };
  return e;
}

// The dtype is the output's; indices are int64 or int32.
OpInfo one_hot_entry() {
  OpInfo e;
  e.op = OpId::OneHot;
  e.dtypes = kAllTypes;
  e.differentiable = false;
  e.domains = {Domain::Indices};
  e.build = [](SampleMaker& m) {
    const DType dt = m.dtype();
    auto depth = [dt](int64_t d) {
      return [dt, d](const std::vector<Tensor>& x) { return one_hot(x[0], d, dt); };
    };
    return std::vector<OpSample>{
        make_sample("[4] depth 5", {m.indices({4}, 5)}, depth(5), {4, 5}, dt),
        make_sample("int32 [2,3] depth 3", {m.indices({2, 3}, 3, kInt32)}, depth(3), {2, 3, 3}, dt),
        make_sample("rank 0 depth 4", {m.indices({}, 4)}, depth(4), {4}, dt),
        make_sample(
            "step-2 slice of [8] depth 6", {m.indices({8}, 6)},
            [dt](const std::vector<Tensor>& x) { return one_hot(slice(x[0], 0, 0, 8, 2), 6, dt); }, {4, 6},
            dt),
    };
  };
  return e;
}

}  // namespace

void add_reduce_shape_entries(std::vector<OpInfo>& t) {
  // ---- reductions ----
  t.push_back(reduction(
      OpId::Sum, [](const Tensor& x, const Axes& a, bool k) { return sum(x, a, k); }, kNumericTypes,
      Domain::Any, true));
  // Distinct values: a unique maximum, so the gradient is defined at every probe.
  t.push_back(reduction(
      OpId::Max, [](const Tensor& x, const Axes& a, bool k) { return max(x, a, k); }, kNumericTypes,
      Domain::Grid, true));
  t.push_back(reduction(
      OpId::Min, [](const Tensor& x, const Axes& a, bool k) { return min(x, a, k); }, kNumericTypes,
      Domain::Grid, true));
  t.push_back(reduction(
      OpId::Prod, [](const Tensor& x, const Axes& a, bool k) { return prod(x, a, k); }, kNumericTypes,
      Domain::AwayFromZero, true));
  t.push_back(reduction(
      OpId::LogSumExp, [](const Tensor& x, const Axes& a, bool k) { return logsumexp(x, a, k); }, kFloatTypes,
      Domain::Any, true));
  t.push_back(arg_reduction(OpId::ArgMax, &argmax));
  t.push_back(arg_reduction(OpId::ArgMin, &argmin));
  t.push_back(cumsum_entry());
  // ---- shape and indexing ----
  t.push_back(reshape_entry());
  t.push_back(permute_entry());
  t.push_back(slice_entry());
  t.push_back(broadcast_to_entry());
  t.push_back(concat_entry());
  t.push_back(pad_entry());
  t.push_back(gather_entry());
  t.push_back(scatter_add_entry());
  t.push_back(one_hot_entry());
}

}  // namespace strata::testing
