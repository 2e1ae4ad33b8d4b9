// strata-train --strategy parameter_server: the program every task of a
// ParameterServerStrategy job runs (chief, workers and parameter servers, started by
// `strata-launch --workers N --ps M -- strata-train --strategy parameter_server ...`).
//
// Roles come from TF_CONFIG: a "ps" task serves variables until the chief shuts the job
// down; a "worker" builds the same model and runs the chief's closures; the "chief"
// schedules one closure per training step through a ClusterCoordinator (each closure is
// one optimizer step on one worker, over --global-batch examples of that worker's shard),
// evaluates, writes checkpoints (model, optimizer, global step: the per-worker input
// iterators are not part of them, so a resumed run restarts its input) and the --report
// file, then shuts the cluster down so that every task exits 0. As in the synchronous
// modes, the chief holds --model-dir's lock (one job per directory), a NaN loss stops the
// job (TerminateOnNaN) and a run whose directory is already at --steps evaluates again
// and reports only what it measured (null for the rest). A parameter server that
// is lost fails the job with an error naming it; a worker that is lost has its closures
// run on the others.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <strata/data/labeled_arrays.h>
#include <strata/train/nn/sequential.h>

namespace strata::tools {

struct PsTrainData {
  data::LabeledArrays train, eval;
  std::string description;  // for the start-up line
};

struct PsTrainJob {
  std::string model, data, model_dir, report, precision, optimizer;
  int64_t steps = 0, steps_per_loop = 1, global_batch = 1, eval_steps = -1, eval_interval = 0, seed = 1;
  double learning_rate = 1e-3;
  bool quiet = false, verbose = false;
  // Keras's TerminateOnNaN on the chief's loop (strata-train's --no-terminate-on-nan).
  bool terminate_on_nan = true;
  // The chief's checkpoints written on a background thread (strata-train's --async-checkpoint).
  bool async_checkpoint = false;
  // Called by the chief and the workers (not by parameter servers), before the model is
  // built; every task must get the same data.
  std::function<PsTrainData()> load_data;
  // Builds the model; called inside the strategy's scope on the chief and every worker.
  std::function<nn::Sequential(const PsTrainData&)> build_model;
};

// Runs this process's task of the job; returns the exit status (0 on success) and throws
// strata::Error on failure.
int run_parameter_server_training(const PsTrainJob& job);

}  // namespace strata::tools
