#!/usr/bin/env bash
# strata next to TensorFlow 2.21 and PyTorch 2.x on this machine, in one run, with ratios
# from that run: the training workloads at 1 and 2 threads (strata-bench's train suite;
# TensorFlow's custom loop under the default strategy and MirroredStrategy(2), with and
# without tf.function, and Keras fit under MirroredStrategy(2); PyTorch eager and
# torch.compile), the eager overhead of a 1-element add, and across 2 processes on
# 127.0.0.1 (strata-train --strategy multi_worker under strata-launch, TensorFlow's
# MultiWorkerMirroredStrategy, PyTorch DDP; all-reduce bus bandwidth). Ends with one
# Markdown table (bench/compare/table.py) for bench/README.md.
#
# Python: the comparison environment (.venv-compare, scripts/compare-env.sh) when present;
# otherwise Debian's python3-torch (PyTorch 1.13, no TensorFlow); otherwise strata alone.
#   [STRATA_BUILD_DIR=build] [STRATA_COMPARE_OUT=DIR] bench/compare/run.sh [--quick]
# Timings mean something only on an idle machine (load average < 1 before starting).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${STRATA_BUILD_DIR:-build}  # the build folder holding bin/strata-bench
bin=$build/bin
for program in strata-bench strata-train strata-launch; do
  [ -x "$bin/$program" ] || { echo "build $program first (cmake --build $build --target $program)" >&2; exit 2; }
done
quick=${1:-}
out=${STRATA_COMPARE_OUT:-$build/compare}
rm -rf "$out"
mkdir -p "$out"

tf_python='' torch_python=''
if [ -x .venv-compare/bin/python ]; then
  tf_python=.venv-compare/bin/python torch_python=.venv-compare/bin/python
elif /usr/bin/python3 -c "import torch" 2> /dev/null; then
  torch_python=/usr/bin/python3
fi
compile_flag=
if [ -n "$torch_python" ] && "$torch_python" -c "import torch, sys; sys.exit(not hasattr(torch, 'compile'))"; then
  compile_flag=--compile
fi
# PyTorch's best setting on these machines (PLATFORM.md): OpenMP threads that sleep.
export OMP_WAIT_POLICY=PASSIVE

for threads in 1 2; do
  echo "== $threads thread(s) ==" >&2
  STRATA_NUM_THREADS=$threads "$bin/strata-bench" train autograd --threads "$threads" $quick \
    --json "$out/strata-$threads.json" > /dev/null
  if [ -n "$torch_python" ]; then
    "$torch_python" bench/compare/torch_workloads.py --threads "$threads" $quick $compile_flag > "$out/torch-$threads.json"
  fi
  if [ -n "$tf_python" ]; then
    "$tf_python" bench/compare/tf_workloads.py --threads "$threads" $quick > "$out/tf-$threads.json"
  fi
done

echo "== across processes, 2 workers ==" >&2
"$bin/strata-bench" collectives $quick --json "$out/strata-collectives.json" > /dev/null
# strata-train's MLP (784-256-256-10) with SGD, 64 examples per worker, one thread each;
# its steady_examples_per_sec (the median of its 50-step loops) is compared with DDP's
# median of 50-step repetitions.
steps=$([ -n "$quick" ] && echo 40 || echo 600)
STRATA_NUM_THREADS=1 "$bin/strata-launch" --workers 2 -- "$bin/strata-train" --model mlp --strategy multi_worker \
  --global-batch 128 --steps "$steps" --steps-per-loop "$([ -n "$quick" ] && echo 10 || echo 50)" --eval-steps 1 --optimizer sgd \
  --learning-rate 0.01 --quiet --report "$out/strata-multi-worker.json" > /dev/null 2>&1
if [ -n "$torch_python" ]; then
  "$torch_python" bench/compare/torch_ddp_mlp.py --hidden 256 $quick > "$out/torch-ddp.json"
fi
if [ -n "$tf_python" ]; then
  "$tf_python" bench/compare/tf_mwms.py --hidden 256 $quick > "$out/tf-mwms.json"
fi
/usr/bin/python3 bench/compare/table.py "$out"
