#!/usr/bin/env bash
# Builds strata-train and runs the main job: an MLP on the built-in synthetic dataset
# under MirroredStrategy with 2 replicas on logical CPU devices, with checkpoints and
# TensorBoard summaries in build/main-run. Extra arguments are passed to strata-train.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "${STRATA_BUILD_JOBS:-$(nproc)}" --target strata-train
rm -rf build/main-run
exec build/bin/strata-train --model mlp --data synthetic --strategy mirrored --replicas 2 \
  --steps 600 --steps-per-loop 100 --global-batch 128 --eval-steps 20 \
  --model-dir build/main-run --report build/main-run/report.json "$@"
