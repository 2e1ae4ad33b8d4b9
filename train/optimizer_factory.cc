#include <strata/train/optimizer_factory.h>

#include <set>

#include <strata/train/adam.h>
#include <strata/train/sgd.h>

namespace strata::optim {

namespace {

class Hparams {
 public:
  Hparams(const std::string& optimizer, const nlohmann::json& j) : optimizer_(optimizer), j_(j) {
    STRATA_CHECK(j.is_object() || j.is_null(), "make_optimizer(", optimizer,
                 "): hyperparameters must be a JSON object, got ", j.dump());
  }
  double number(const std::string& key, double fallback) {
    used_.insert(key);
    if (!j_.is_object() || !j_.contains(key)) return fallback;
    STRATA_CHECK(j_[key].is_number(), "make_optimizer(", optimizer_, "): '", key,
                 "' must be a number, got ", j_[key].dump());
    return j_[key].get<double>();
  }
  int64_t integer(const std::string& key, int64_t fallback) {
    used_.insert(key);
    if (!j_.is_object() || !j_.contains(key)) return fallback;
    STRATA_CHECK(j_[key].is_number_integer(), "make_optimizer(", optimizer_, "): '", key,
                 "' must be an integer, got ", j_[key].dump());
    return j_[key].get<int64_t>();
  }
  double required(const std::string& key) {
    STRATA_CHECK(j_.is_object() && j_.contains(key), "make_optimizer(", optimizer_,
                 "): missing hyperparameter '", key, "'");
    return number(key, 0);
  }
  bool boolean(const std::string& key, bool fallback) {
    used_.insert(key);
    if (!j_.is_object() || !j_.contains(key)) return fallback;
    STRATA_CHECK(j_[key].is_boolean(), "make_optimizer(", optimizer_, "): '", key,
                 "' must be true or false, got ", j_[key].dump());
    return j_[key].get<bool>();
  }
  // Throws on any key nobody asked for.
  void check_all_used() const {
    if (!j_.is_object()) return;
    for (auto it = j_.begin(); it != j_.end(); ++it)
      STRATA_CHECK(used_.count(it.key()), "make_optimizer(", optimizer_,
                   "): unknown hyperparameter '", it.key(), "'");
  }

 private:
  std::string optimizer_;
  const nlohmann::json& j_;
  std::set<std::string> used_;
};

// Keras's names for the moving average of the weights (every optimizer reads them).
EmaOptions ema_options(Hparams& h) {
  EmaOptions e;
  e.use_ema = h.boolean("use_ema", e.use_ema);
  e.momentum = h.number("ema_momentum", e.momentum);
  e.overwrite_frequency = h.integer("ema_overwrite_frequency", e.overwrite_frequency);
  return e;
}

// Adam and AdamW read the same hyperparameters (AdamW's weight decay is decoupled).
template <typename Opt, typename Options>
Optimizer make_adam_like(Hparams& h) {
  const double lr = h.required("lr");
  Options o;
  o.beta1 = h.number("beta1", o.beta1);
  o.beta2 = h.number("beta2", o.beta2);
  o.epsilon = h.number("eps", o.epsilon);
  o.weight_decay = h.number("weight_decay", o.weight_decay);
  o.global_clipnorm = h.number("global_clipnorm", o.global_clipnorm);
  o.ema = ema_options(h);
  h.check_all_used();
  return Opt(lr, o);
}

}  // namespace

Optimizer make_optimizer(const std::string& name, const nlohmann::json& hparams) {
  Hparams h(name, hparams);
  if (name == "sgd") {
    const double lr = h.required("lr");
    SGDOptions o;
    o.momentum = h.number("momentum", o.momentum);
    o.nesterov = h.boolean("nesterov", o.nesterov);
    o.keras_momentum = h.boolean("keras_momentum", o.keras_momentum);
    o.weight_decay = h.number("weight_decay", o.weight_decay);
    o.global_clipnorm = h.number("global_clipnorm", o.global_clipnorm);
    o.ema = ema_options(h);
    h.check_all_used();
    return SGD(lr, o);
  }
  if (name == "adam") return make_adam_like<Adam, AdamOptions>(h);
  if (name == "adamw") return make_adam_like<AdamW, AdamWOptions>(h);
  fail("make_optimizer: unknown optimizer '", name, "' (expected sgd, adam or adamw)");
}

std::vector<Tensor> optimizer_trajectory(const Optimizer& optimizer, const Tensor& initial,
                                         const std::vector<Tensor>& grads) {
  autograd::VariableOptions options;
  options.name = "param";
  Variable param(initial, options);
  std::vector<Tensor> out;
  for (size_t k = 0; k < grads.size(); ++k) {
    optimizer.apply_gradients({grads[k]}, {param});
    out.push_back(param.value().clone());
  }
  return out;
}

}  // namespace strata::optim
