#!/usr/bin/env bash
# strata next to PyTorch on this machine, in one run: the training steps/s, matmul and
# eager-overhead workloads at 1 and 2 threads, with ratios. Needs Debian's python3-torch
# (apt-get install python3-torch); without it, prints strata's figures only.
#   [STRATA_BUILD_DIR=build] bench/compare/run.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${STRATA_BUILD_DIR:-build}  # the build folder holding bin/strata-bench
bench=$build/bin/strata-bench
[ -x "$bench" ] || { echo "build strata-bench first (cmake --build $build --target strata-bench)" >&2; exit 2; }
quick=${1:-}
have_torch=0
/usr/bin/python3 -c "import torch" 2>/dev/null && have_torch=1
for threads in 1 2; do
  echo "== $threads thread(s) =="
  STRATA_NUM_THREADS=$threads "$bench" train autograd --threads "$threads" $quick --json "/tmp/strata-bench-$threads.json" >/dev/null
  if [ $have_torch = 1 ]; then
    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/compare/torch_workloads.py --threads "$threads" $quick > "/tmp/torch-$threads.json"
  else
    echo '{}' > "/tmp/torch-$threads.json"
  fi
  /usr/bin/python3 - "$threads" <<'PY'
import json, sys
t = sys.argv[1]
s = {r["name"]: r for r in json.load(open(f"/tmp/strata-bench-{t}.json"))["results"]}
p = json.load(open(f"/tmp/torch-{t}.json"))
def row(label, strata, torch_value, unit, lower=False):
    ratio = "" if not torch_value else f"{(torch_value / strata if lower else strata / torch_value):6.2f}x"
    tv = f"{torch_value:10.3f}" if torch_value else "       n/a"
    print(f"{label:40s} strata {strata:10.3f}  pytorch {tv}  {unit:8s} {ratio}")
mlp = s.get("MLP 784-512-512-10 b128 default", {}).get("value", 0)
cnn = s.get("CNN b64 default", {}).get("value", 0)
row("MLP train (default strategy)", mlp, p.get("mlp_steps_per_s"), "steps/s")
row("CNN train (default strategy)", cnn, p.get("cnn_steps_per_s"), "steps/s")
row("eager add, no tape", s.get("eager add, 1 element, no tape", {}).get("value", 0), p.get("eager_add_us"), "us", True)
row("eager add, taped", s.get("eager add, 1 element, watching tape", {}).get("value", 0), p.get("eager_add_grad_us"), "us", True)
PY
done
# Across processes, 2 workers on 127.0.0.1: strata's all-reduce (GlooCommunicator) next to
# torch.distributed's gloo all_reduce, and PyTorch DDP's MLP samples/s (torch_ddp_mlp.py).
echo "== across processes, 2 workers =="
"$bench" collectives $quick --json /tmp/strata-bench-collectives.json >/dev/null
if [ $have_torch = 1 ]; then
  /usr/bin/python3 bench/compare/torch_ddp_mlp.py $quick > /tmp/torch-ddp.json
else
  echo '{}' > /tmp/torch-ddp.json
fi
/usr/bin/python3 - <<'PY'
import json
s = {r["name"]: r for r in json.load(open("/tmp/strata-bench-collectives.json"))["results"]}
p = json.load(open("/tmp/torch-ddp.json"))
for label, nbytes in (("1 MB", 1 << 20), ("64 MB", 64 << 20)):
    r = s.get(f"cross-process all_reduce x2 {label} busbw")
    sv = f"{r['value']:10.3f}" if r else "       n/a"
    tv = p.get("allreduce_busbw_gbps", {}).get(str(nbytes))
    ratio = f"{r['value'] / tv:6.2f}x" if r and tv else ""
    tvs = f"{tv:10.3f}" if tv else "       n/a"
    print(f"{'all_reduce busbw x2 ' + label:40s} strata {sv}  pytorch {tvs}  GB/s     {ratio}")
if p.get("ddp_mlp_samples_per_s"):
    print(f"{'PyTorch DDP MLP 2 workers x b64':40s} pytorch {p['ddp_mlp_samples_per_s']:10.0f} samples/s")
PY
