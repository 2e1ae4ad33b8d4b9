#include <strata/autograd/gradcheck.h>

#include <cmath>
#include <sstream>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/core/random.h>

namespace strata::autograd {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options) {
  GradcheckResult result;
  // Analytic gradients of L = sum(fn(x) * w) for fixed random weights w.
  Tensor weights;
  std::vector<Tensor> analytic;
  {
    GradientTape tape;
    for (const Tensor& t : inputs) {
      if (is_floating(t.dtype())) tape.watch(t);
    }
    Tensor y = fn(inputs);
    STRATA_CHECK(is_floating(y.dtype()), "gradcheck: the function must return a floating tensor");
    weights = random::normal(y.shape(), options.seed, 0.0, 1.0, y.dtype());
    Tensor loss = sum(y * weights);
    std::vector<Tensor> sources;
    for (const Tensor& t : inputs) sources.push_back(t);
    analytic = tape.gradient(loss, sources, {}, UnconnectedGradients::Zero);
  }
  auto objective = [&](const std::vector<Tensor>& xs) {
    return sum(cast(fn(xs), kFloat64) * cast(weights, kFloat64)).item<double>();
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!is_floating(inputs[i].dtype())) continue;
    const Tensor& base = inputs[i];
    const std::vector<double> got = analytic[i].to_vector<double>();
    std::vector<double> values = base.to_vector<double>();
    const int64_t n = base.numel();
    std::vector<Tensor> xs = inputs;
    for (int64_t j = 0; j < n; ++j) {
      auto at = [&](double delta) {
        const double saved = values[size_t(j)];
        values[size_t(j)] = saved + delta;
        xs[i] = Tensor::from_vector(values, base.shape(), base.dtype(), base.device());
        values[size_t(j)] = saved;
        return objective(xs);
      };
      const double numeric = (at(options.eps) - at(-options.eps)) / (2 * options.eps);
      const double err = std::abs(numeric - got[size_t(j)]);
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (!(err <= options.atol + options.rtol * std::abs(numeric)) && result.ok) {
        result.ok = false;
        std::ostringstream os;
        os << "gradcheck: input " << i << " (shape " << shape_str(base.shape()) << ") element " << j
           << ": analytic " << got[size_t(j)] << " vs numeric " << numeric << " (|diff| " << err << ")";
        result.message = os.str();
      }
    }
  }
  return result;
}

}  // namespace strata::autograd
