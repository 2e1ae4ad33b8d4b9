#include <strata/train/trainer.h>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>

namespace strata::train {

namespace {

int64_t read_step(const Variable& step) {
  autograd::StopRecording no_tape;
  return step.value().item<int64_t>();
}

void check_global_step(const Variable& step, const char* who) {
  STRATA_CHECK(is_integral(step.dtype()) && step.shape().empty(), who,
               ": the global step must be an integer scalar, got ", dtype_name(step.dtype()), " ",
               shape_str(step.shape()));
}

distribute::Strategy& strategy_or_current(distribute::Strategy* strategy) {
  return strategy ? *strategy : distribute::get_strategy();
}

}  // namespace

// ---- Outputs ----

OutputValue::OutputValue(const Tensor& value) {
  STRATA_CHECK(value.defined(), "train::Outputs: an output tensor is undefined");
  STRATA_CHECK(value.numel() == 1, "train::Outputs: an output must be a scalar (one element), got shape ",
               shape_str(value.shape()));
  autograd::StopRecording no_tape;
  value_ = value.item<double>();
}

Outputs::Outputs(std::initializer_list<std::pair<const std::string, OutputValue>> values) {
  for (const auto& [name, v] : values) {
    STRATA_CHECK(emplace(name, v.value()).second, "train::Outputs: the output '", name, "' is given twice");
  }
}

// ---- StandardTrainer ----

StandardTrainer::StandardTrainer(distribute::DistributedDataset train_dataset, StandardTrainerOptions options)
    : strategy_(strategy_or_current(options.strategy)), dataset_(std::move(train_dataset)) {}

StandardTrainer::StandardTrainer(const data::Dataset& train_dataset, StandardTrainerOptions options)
    : StandardTrainer(strategy_or_current(options.strategy).experimental_distribute_dataset(train_dataset),
                      options) {}

void StandardTrainer::use_global_step(const Variable& global_step) {
  STRATA_CHECK(global_step.defined(), "StandardTrainer::use_global_step: undefined variable");
  if (!global_step_.defined()) {
    check_global_step(global_step, "StandardTrainer");
    global_step_ = global_step;
    return;
  }
  STRATA_CHECK(global_step_ == global_step,
               "StandardTrainer: the Controller's global step is not the trainer's own (construct the trainer "
               "without one, Orbit's form, or give both the same variable)");
}

StandardTrainer::StandardTrainer(distribute::Strategy& strategy, distribute::DistributedDataset train_dataset,
                                 Variable global_step)
    : strategy_(strategy), dataset_(std::move(train_dataset)), global_step_(std::move(global_step)) {
  STRATA_CHECK(global_step_.defined(),
               "StandardTrainer: a global step variable is required (train::create_global_step())");
  check_global_step(global_step_, "StandardTrainer");
}

distribute::DistributedIterator& StandardTrainer::train_iterator() {
  if (!iterator_) iterator_ = std::make_unique<distribute::DistributedIterator>(dataset_.make_iterator());
  return *iterator_;
}

void StandardTrainer::set_train_dataset(distribute::DistributedDataset dataset) {
  dataset_ = std::move(dataset);
  iterator_.reset();
}

ExtraState distributed_input_state(std::function<distribute::DistributedIterator&()> iterator) {
  using nlohmann::json;
  auto parse = [](const json& j) {
    distribute::JobInputPosition position;
    if (j.is_string()) {
      position.states.push_back(data::IteratorState::from_string(j.get<std::string>()));
      return position;
    }
    STRATA_CHECK(j.is_array() && !j.empty(), "input state: expected a string or an array of strings (one per "
                 "worker), got ", j.dump().substr(0, 200));
    position.per_worker = true;
    for (const json& s : j) {
      STRATA_CHECK(s.is_string(), "input state: worker ", position.states.size(), "'s position is not a string: ",
                   s.dump().substr(0, 200));
      position.states.push_back(data::IteratorState::from_string(s.get<std::string>()));
    }
    return position;
  };
  ExtraState e;
  e.save = [iterator] {
    const distribute::JobInputPosition position = iterator().save_job_position();
    if (!position.per_worker) return json(position.states[0].to_string());
    json all = json::array();
    for (const auto& state : position.states) all.push_back(state.to_string());
    return all;
  };
  e.validate = [parse](const json& j) { parse(j); };
  e.restore = [iterator, parse](const json& j) { iterator().restore_job_position(parse(j)); };
  return e;
}

// Through `this`, not the iterator: set_train_dataset() may replace the iterator.
ExtraState StandardTrainer::input_state() {
  return distributed_input_state([this]() -> distribute::DistributedIterator& { return train_iterator(); });
}

distribute::PerReplica<data::Batch> StandardTrainer::next_batch(distribute::DistributedIterator& iterator) {
  auto batch = iterator.next();
  STRATA_CHECK(batch.has_value(),
               "StandardTrainer: the training data ended (repeat() the training dataset, or train fewer steps)");
  return std::move(*batch);
}

Outputs StandardTrainer::train(int64_t num_steps) {
  STRATA_CHECK(num_steps >= 0, "StandardTrainer::train: num_steps must be >= 0, got ", num_steps);
  train_loop_begin();
  distribute::DistributedIterator& it = train_iterator();
  if (!global_step_.defined()) {  // Orbit form outside a Controller: no step to count
    for (int64_t i = 0; i < num_steps; ++i) train_step(it);
    return train_loop_end();
  }
  int64_t step = read_step(global_step_);
  for (int64_t i = 0; i < num_steps; ++i) {
    train_step(it);
    const int64_t after = read_step(global_step_);
    if (after == step) {
      // The step did not advance it: do so here, in cross-replica context (every
      // component of a mirrored step counter moves once).
      global_step_.assign_add(Tensor::scalar(int64_t(1), kInt64));
    } else {
      STRATA_CHECK(after == step + 1, "StandardTrainer::train: train_step moved the global step from ", step,
                   " to ", after, "; a step may advance it by one (inside strategy.run, the OnlyFirstReplica "
                   "aggregation counts the replicas' increments once) or leave it to the trainer");
    }
    ++step;
  }
  return train_loop_end();
}

// ---- StandardEvaluator ----

StandardEvaluator::StandardEvaluator(distribute::DistributedDataset eval_dataset, StandardEvaluatorOptions options)
    : StandardEvaluator(distribute::get_strategy(), std::move(eval_dataset), options) {}

StandardEvaluator::StandardEvaluator(const data::Dataset& eval_dataset, StandardEvaluatorOptions options)
    : StandardEvaluator(distribute::get_strategy().experimental_distribute_dataset(eval_dataset), options) {}

StandardEvaluator::StandardEvaluator(distribute::Strategy& strategy, distribute::DistributedDataset eval_dataset,
                                     StandardEvaluatorOptions options)
    : strategy_(strategy), dataset_(std::move(eval_dataset)), options_(options) {}

Outputs StandardEvaluator::evaluate(int64_t num_steps) {
  STRATA_CHECK(num_steps == -1 || num_steps > 0,
               "StandardEvaluator::evaluate: num_steps must be > 0, or -1 (until the data ends), got ", num_steps);
  if (options_.recreate_iterator_for_each_eval || !iterator_) {
    iterator_.reset();  // stop the old iterator's prefetch thread before starting another
    iterator_ = std::make_unique<distribute::DistributedIterator>(dataset_.make_iterator());
  }
  eval_begin();
  for (int64_t i = 0; num_steps < 0 || i < num_steps; ++i) {
    std::optional<Outputs> out = eval_step(*iterator_);
    if (!out) break;
    eval_reduce(*out);
  }
  return eval_end();
}

Variable create_global_step() {
  autograd::VariableOptions options;
  options.name = "global_step";
  options.trainable = false;
  options.aggregation = autograd::VariableAggregation::OnlyFirstReplica;
  return Variable(zeros({}, kInt64), options);
}

}  // namespace strata::train
