#!/usr/bin/env bash
# strata-train --strategy multi_worker against PyTorch DDP (bench/compare/torch_ddp_mlp.py)
# on the same MLP 784-256-256-10, 2 worker processes x 64 examples, SGD, one thread each,
# in alternating pairs (strata, then DDP) so that a change of load on the machine hits
# both; prints each pair's samples/s and ratio, then the median ratio. strata's figure is
# its report's steady_examples_per_sec (the median of 50-step loops), DDP's the median of
# its 50-step repetitions: both are training-loop throughput, without start-up.
#   [STRATA_BUILD_DIR=build] [PYTHON=...] bench/compare/multi_worker_pairs.sh [PAIRS]
# Real-time priority (chrt -f 1, as root) keeps other processes from delaying wake-ups.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${STRATA_BUILD_DIR:-build}/bin
python=${PYTHON:-}
if [ -z "$python" ]; then  # Debian's python3-torch lives under /usr/bin/python3
  python=python3
  /usr/bin/python3 -c "import torch" 2> /dev/null && python=/usr/bin/python3
fi
pairs=${1:-5}
for program in strata-train strata-launch; do
  [ -x "$bin/$program" ] || { echo "build $program first" >&2; exit 2; }
done
"$python" -c "import torch" 2> /dev/null || { echo "$python cannot import torch (apt-get install python3-torch)" >&2; exit 2; }
export OMP_WAIT_POLICY=PASSIVE  # PyTorch's best setting on these machines (PLATFORM.md)
prio=()
if chrt -f 1 true 2> /dev/null; then prio=(chrt -f 1); fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ratios=()
for ((i = 1; i <= pairs; i++)); do
  STRATA_NUM_THREADS=1 "${prio[@]}" "$bin/strata-launch" --workers 2 --timeout 600 -- "$bin/strata-train" --model mlp \
    --strategy multi_worker --global-batch 128 --steps 600 --steps-per-loop 50 --eval-steps 1 --optimizer sgd \
    --learning-rate 0.01 --quiet --model-dir "$work/run$i" --report "$work/strata$i.json" > /dev/null 2>&1
  "${prio[@]}" "$python" bench/compare/torch_ddp_mlp.py --hidden 256 > "$work/ddp$i.json"
  ratio=$("$python" - "$work/strata$i.json" "$work/ddp$i.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["steady_examples_per_sec"]
d = json.load(open(sys.argv[2]))["ddp_mlp_samples_per_s"]
print(f"{s / d:.3f}")
print(f"pair: strata {s:.0f} samples/s, DDP {d:.0f} samples/s, {s / d:.2f}x", file=sys.stderr)
PY
)
  ratios+=("$ratio")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR] = $1} END {printf "median of %d pairs: %.2fx (range %.2f-%.2fx)\n", NR, a[int((NR + 1) / 2)], a[1], a[NR]}'
