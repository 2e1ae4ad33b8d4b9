#include <strata/distribute/ps/parameter_server_strategy.h>

#include <chrono>
#include <map>
#include <thread>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/ps/protocol.h>

namespace strata::distribute {

namespace {

using Clock = std::chrono::steady_clock;

void check_cluster(const ClusterResolver& r) {
  const ClusterSpec& spec = r.cluster_spec();
  STRATA_CHECK(spec.num_tasks("chief") == 1, "ParameterServerStrategy: the cluster needs exactly one 'chief' task "
               "(the coordinator), got ", spec.num_tasks("chief"), ": ", spec.to_json());
  STRATA_CHECK(spec.num_tasks("worker") >= 1, "ParameterServerStrategy: the cluster needs at least one 'worker' task: ",
               spec.to_json());
  STRATA_CHECK(spec.num_tasks("ps") >= 1, "ParameterServerStrategy: the cluster needs at least one 'ps' task: ",
               spec.to_json());
  STRATA_CHECK(r.task_type() == "chief" || r.task_type() == "worker", "ParameterServerStrategy: this task is '",
               r.task_type(), "' ", r.task_id(), "; only the chief and the workers create the strategy (a 'ps' task "
               "runs distribute::run_parameter_server)");
  for (const std::string job : {"chief", "worker", "ps"})
    for (int i = 0; i < spec.num_tasks(job); ++i)
      STRATA_CHECK(!spec.task_address(job, i).empty(), "ParameterServerStrategy: task ", job, " ", i,
                   " has no address in the cluster spec");
}

}  // namespace

ParameterServerStrategy::ParameterServerStrategy(ClusterResolver cluster_resolver,
                                                 VariablePartitioner variable_partitioner,
                                                 ParameterServerStrategyOptions options)
    : Strategy({Device()}),
      resolver_(std::move(cluster_resolver)),
      partitioner_(std::move(variable_partitioner)),
      options_(options) {
  check_cluster(resolver_);
  STRATA_CHECK(options_.rpc_timeout_seconds > 0 && options_.startup_timeout_seconds > 0,
               "ParameterServerStrategy: timeouts must be positive (rpc ", options_.rpc_timeout_seconds, " s, startup ",
               options_.startup_timeout_seconds, " s)");
  client_ = std::make_unique<VariableClient>(resolver_.cluster_spec(), is_chief() ? ps::kFromChief : ps::kFromWorker,
                                             options_.rpc_timeout_seconds, options_.startup_timeout_seconds);
}

ParameterServerStrategy::~ParameterServerStrategy() = default;

const VariablePlacement& ParameterServerStrategy::placement(const Variable& var) const {
  auto* impl = dynamic_cast<const PsVariableImpl*>(&var.impl());
  STRATA_CHECK(impl && &impl->strategy() == this, "ParameterServerStrategy::placement: variable '", var.name(),
               "' (", var.impl().kind(), ") was not created in this strategy's scope");
  return impl->placement();
}

std::string ParameterServerStrategy::next_key(const std::string& base) {
  std::lock_guard<std::mutex> lock(mu_);
  return base + "#" + std::to_string(name_counts_[base]++);
}

std::shared_ptr<PsVariableImpl> ParameterServerStrategy::track(std::shared_ptr<const VariablePlacement> placement,
                                                               const autograd::VariableOptions& options) {
  auto var = std::make_shared<PsVariableImpl>(*this, std::move(placement), options);
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(live_, [](const auto& w) { return w.expired(); });
  live_.push_back(var);
  return var;
}

std::vector<std::shared_ptr<PsVariableImpl>> ParameterServerStrategy::live_variables() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<PsVariableImpl>> out;
  for (const auto& w : live_)
    if (auto v = w.lock()) out.push_back(std::move(v));
  return out;
}

std::shared_ptr<autograd::VariableImpl> ParameterServerStrategy::create_variable(
    const Tensor& initial, const autograd::VariableOptions& options) {
  autograd::StopRecording no_tape;
  auto p = std::make_shared<VariablePlacement>();
  p->key = next_key(options.name);
  p->dtype = initial.dtype();
  p->shape = initial.shape();

  if (!is_chief()) {
    // The chief creates and initialises every variable; a worker building the same model
    // finds it through the directory on ps 0 (the chief may not have got there yet).
    const auto start = Clock::now();
    std::optional<nlohmann::json> found;
    for (int sleep_ms = 5;; sleep_ms = std::min(sleep_ms * 2, 200)) {
      found = client_->get_placement(p->key);
      if (found) break;
      const double waited = std::chrono::duration<double>(Clock::now() - start).count();
      STRATA_CHECK(waited < options_.startup_timeout_seconds, "ParameterServerStrategy: variable '", options.name,
                   "' (key '", p->key, "') was not created by the chief within ", options_.startup_timeout_seconds,
                   " s; every task must build the same variables in the same order, and only the chief creates "
                   "them (ParameterServerStrategyOptions::startup_timeout_seconds)");
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    }
    VariablePlacement chief = VariablePlacement::from_json(*found);
    STRATA_CHECK(chief.dtype == p->dtype && chief.shape == p->shape, "ParameterServerStrategy: variable '",
                 options.name, "' (key '", p->key, "') is ", dtype_name(chief.dtype), shape_str(chief.shape),
                 " on the chief but ", dtype_name(p->dtype), shape_str(p->shape), " on this ",
                 resolver_.task_type(), " task (", resolver_.task_id(), "): every task must build the same model");
    return track(std::make_shared<const VariablePlacement>(std::move(chief)), options);
  }

  int64_t shards = 1;
  if (partitioner_ && !p->shape.empty() && p->shape[0] > 1) {
    shards = partitioner_(p->shape, p->dtype);
    STRATA_CHECK(shards >= 1 && shards <= p->shape[0], "ParameterServerStrategy: the variable partitioner returned ",
                 shards, " shards for variable '", options.name, "' of shape ", shape_str(p->shape),
                 " (expected 1 to ", p->shape[0], ")");
  }
  const std::vector<int64_t> rows = shards > 1 ? shard_rows(p->shape[0], shards)
                                               : std::vector<int64_t>{p->shape.empty() ? 0 : p->shape[0]};
  std::map<int, std::vector<VariableClient::Item>> per_ps;
  int64_t offset = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    VariableShard s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      s.ps = int(round_robin_++ % num_ps());
    }
    s.key = shards > 1 ? p->key + "/part_" + std::to_string(i) : p->key;
    s.row_offset = offset;
    s.rows = rows[i];
    const Tensor part = shards > 1 ? initial.slice(0, offset, offset + rows[i]) : initial;
    per_ps[s.ps].push_back({s.key, ps::kCreateOverwrite, part});
    offset += rows[i];
    p->shards.push_back(std::move(s));
  }
  for (auto& [ps_index, items] : per_ps) client_->create(ps_index, items);
  // Published after the shards exist, so that a worker that finds it can use them.
  client_->put_placement(p->key, p->to_json());
  return track(std::move(p), options);
}

std::shared_ptr<autograd::VariableImpl> ParameterServerStrategy::create_slot(const PsVariableImpl& parent,
                                                                             const Tensor& initial,
                                                                             const autograd::VariableOptions& options) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(initial.defined(), "Variable '", options.name, "': undefined initial value");
  const VariablePlacement& pp = parent.placement();
  auto p = std::make_shared<VariablePlacement>();
  p->key = next_key(pp.key + "/" + options.name);
  p->dtype = initial.dtype();
  p->shape = initial.shape();
  if (pp.sharded() && initial.shape() == pp.shape) {
    for (size_t i = 0; i < pp.shards.size(); ++i) {
      VariableShard s = pp.shards[i];
      s.key = p->key + "/part_" + std::to_string(i);
      p->shards.push_back(std::move(s));
    }
  } else {
    p->shards.push_back(VariableShard{pp.shards[0].ps, p->key, 0, p->shape.empty() ? 0 : p->shape[0]});
  }
  // Slots are created by whichever task needs them first (a worker's first step, or the
  // chief restoring a checkpoint); the others find them.
  std::map<int, std::vector<VariableClient::Item>> per_ps;
  for (const auto& s : p->shards) {
    const Tensor part = p->sharded() ? initial.slice(0, s.row_offset, s.row_offset + s.rows) : initial;
    per_ps[s.ps].push_back({s.key, ps::kCreateIfAbsent, part});
  }
  for (auto& [ps_index, items] : per_ps) client_->create(ps_index, items);
  return track(std::move(p), options);
}

std::vector<Tensor> ParameterServerStrategy::read_variables(const std::vector<const VariablePlacement*>& placements) {
  autograd::StopRecording no_tape;
  // Group every shard's key by server, one read request each.
  std::map<int, std::vector<std::string>> keys;
  std::map<int, std::vector<std::pair<size_t, size_t>>> where;  // server -> (variable, shard)
  for (size_t v = 0; v < placements.size(); ++v) {
    for (size_t s = 0; s < placements[v]->shards.size(); ++s) {
      const VariableShard& shard = placements[v]->shards[s];
      keys[shard.ps].push_back(shard.key);
      where[shard.ps].emplace_back(v, s);
    }
  }
  std::vector<std::vector<Tensor>> parts(placements.size());
  for (size_t v = 0; v < placements.size(); ++v) parts[v].resize(placements[v]->shards.size());
  for (auto& [ps_index, list] : keys) {
    std::vector<Tensor> got = client_->read(ps_index, list);
    for (size_t k = 0; k < got.size(); ++k) {
      const auto [v, s] = where[ps_index][k];
      parts[v][s] = std::move(got[k]);
    }
  }
  std::vector<Tensor> out;
  out.reserve(placements.size());
  for (size_t v = 0; v < placements.size(); ++v) {
    Tensor t = parts[v].size() == 1 ? parts[v][0] : concat(parts[v], 0);
    STRATA_CHECK(t.dtype() == placements[v]->dtype && t.shape() == placements[v]->shape,
                 "ParameterServerStrategy: variable '", placements[v]->key, "' read back as ", dtype_name(t.dtype()),
                 shape_str(t.shape()), ", expected ", dtype_name(placements[v]->dtype),
                 shape_str(placements[v]->shape));
    out.push_back(std::move(t));
  }
  return out;
}

void ParameterServerStrategy::write_variables(const std::vector<Write>& writes) {
  autograd::StopRecording no_tape;
  std::map<int, std::vector<VariableClient::Item>> per_ps;
  for (const Write& w : writes) {
    const VariablePlacement& p = *w.placement;
    STRATA_CHECK(w.value.shape() == p.shape && w.value.dtype() == p.dtype, "ParameterServerStrategy: write of ",
                 dtype_name(w.value.dtype()), shape_str(w.value.shape()), " to variable '", p.key, "' of ",
                 dtype_name(p.dtype), shape_str(p.shape));
    for (const VariableShard& s : p.shards) {
      const Tensor part = p.sharded() ? w.value.slice(0, s.row_offset, s.row_offset + s.rows) : w.value;
      per_ps[s.ps].push_back({s.key, w.op, part});
    }
  }
  for (auto& [ps_index, items] : per_ps) client_->update(ps_index, items);
}

}  // namespace strata::distribute
