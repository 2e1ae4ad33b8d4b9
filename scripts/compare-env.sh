#!/usr/bin/env bash
# Creates .venv-compare/ (git-ignored): the Python environment of the comparisons against
# TensorFlow and PyTorch (bench/compare/). The product never depends on Python; nothing
# outside bench/compare/ uses this environment. Reused when its stamp matches the pins
# below; delete the folder (or change a pin) to rebuild it. Prints the environment's python.
#
# Pinned versions (2026-11-23):
#   tensorflow-cpu 2.21.0, tf-keras 2.21.0, tensorboard 2.21.0  TensorFlow and Keras 2
#   tf-models-official 2.20.0 (Orbit)   installed WITHOUT its dependencies: it pins
#                                       tensorflow~=2.20.0 and tensorflow-text (both clash
#                                       with tensorflow-cpu 2.21) and dozens of packages
#                                       (kaggle, opencv, pandas...) that Orbit never
#                                       imports; orbit/ needs only tensorflow and absl.
#   torch 2.15.0                        from PyPI. download.pytorch.org (the CPU-only wheel
#                                       index) is not reachable from these machines, so the
#                                       default wheel comes with its NVIDIA libraries:
#                                       about 3 GB downloaded, ~6 GB installed, unused on
#                                       the CPU. Set STRATA_TORCH_INDEX to a reachable CPU
#                                       index (https://download.pytorch.org/whl/cpu) to
#                                       get the ~200 MB CPU wheel instead.
#   safetensors 0.8.0
# Usage: scripts/compare-env.sh   (from anywhere; takes several minutes the first time)
set -euo pipefail
cd -P "$(dirname "$0")/.."
venv=$PWD/.venv-compare
python=${STRATA_COMPARE_PYTHON:-/usr/bin/python3}
pins=(tensorflow-cpu==2.21.0 tf-keras==2.21.0 tensorboard==2.21.0 safetensors==0.8.0)
torch_pin=torch==2.15.0
models_pin=tf-models-official==2.20.0
stamp="${pins[*]} $torch_pin $models_pin index=${STRATA_TORCH_INDEX:-pypi}"

if [[ -f $venv/.strata-stamp && $(cat "$venv/.strata-stamp") == "$stamp" ]]; then
  echo "$venv/bin/python"
  exit 0
fi
rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q)
nice -n 19 "${pip[@]}" "${pins[@]}" >&2
if [[ -n ${STRATA_TORCH_INDEX:-} ]]; then
  nice -n 19 "${pip[@]}" --index-url "$STRATA_TORCH_INDEX" "$torch_pin" >&2
else
  nice -n 19 "${pip[@]}" "$torch_pin" >&2
fi
nice -n 19 "${pip[@]}" --no-deps "$models_pin" >&2
# Fails here (and leaves no stamp) if the environment cannot run what bench/compare uses.
"$venv/bin/python" -c "import tensorflow, tf_keras, orbit, torch, safetensors, tensorboard" >&2
echo "$stamp" > "$venv/.strata-stamp"
echo "$venv/bin/python"
