#!/usr/bin/env bash
# Checks the CUDA backend on a lent GPU machine (H100/H200, CUDA 13, CMake, Ninja, PyTorch;
# no Debian packages, no network) in one command. Run through the device tool after
# scripts/gpu-carry.sh filled third_party_carry/ here (README: "Checking the CUDA backend on
# a lent GPU"):
#
#   bash scripts/gpu-check.sh [all|gpu|build|test|bench]  (default: all)
#
#   build  finds cuDNN/NCCL (the system's, else PyTorch's nvidia-* wheels) and says which;
#          configures build-gpucheck/ with CUDA ON for sm_90 only, without OpenBLAS,
#          protobuf, Gloo and ZeroMQ, the header-only packages from third_party_carry/;
#          builds the CUDA tests, strata-golden, strata-train and strata-bench (-j cores)
#   test   ctest -L "^cuda$" (the GPU tests: CPU-vs-CUDA parity of every op, and NCCL:
#          1-rank collectives in every dtype, Mirrored over 2 logical GPUs and
#          OneDevice(cuda:0) against the CPU) and -L "^cuda-emulation$"; strata-golden
#          --device cuda:0 (and on the CPU, for comparison); strata-train --model cnn on the
#          carried MNIST under one_device(cuda:0) (and cpu:0), with mixed_float16 and
#          mixed_bfloat16 on cuda:0, and under mirrored over 2 logical GPUs of cuda:0
#          (--virtual-gpus 2)
#   bench  strata-bench gpu --device cuda:0 (with the all-reduce bus bandwidth of cuda:0's
#          2 logical replicas) and bench/compare/torch_gpu.py (PyTorch, same GPU, same
#          call), merged with ratios
#   all    all three, most valuable first (the emulation tests, which need no GPU, last)
#   gpu    all, less what needs no GPU (the emulation tests, strata-golden and strata-train
#          on the CPU; CI runs those): the shortest full check, for a lease of minutes
#
# test and bench build what they need first (a no-op when an earlier call on the same
# machine built it; a fresh machine starts bare). Each stage runs under `timeout`, inside a
# budget for the whole call (GPU_CHECK_BUDGET_S, default 540 s: the device tool stops a
# call at 600 s); a stage that fails is reported and the next one runs; a stage the budget
# cannot fit is skipped and named. Exit status 1 when any stage failed, timed out or was
# skipped for time.
#
# Output, under $OUT (the device tool's folder that comes back; ./build-gpucheck/out when
# unset): gpu-check.log (every command's output), gpu-check.json (stages, machine, cuDNN and
# NCCL used, ctest/golden/train results, benchmark rows next to PyTorch's), and the raw
# strata-bench / torch / strata-train JSON files. stdout carries a summary at the end.
#
# Environment: GPU_CHECK_BUDGET_S, GPU_CHECK_JOBS (default: nproc), GPU_CHECK_CUDA_ARCH
# (default 90), GPU_CHECK_DEVICE (cuda:0), GPU_CHECK_BUILD_DIR (build-gpucheck),
# GPU_CHECK_TRAIN_STEPS (300), GPU_CHECK_QUICK=1 (small benchmark sizes), PYTHON (python3),
# STRATA_CARRY_DIR (third_party_carry), GPU_CHECK_CAP_SCALE (multiplies every stage's time
# limit: for trying the script on a slower machine, with a larger budget).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mode=${1:-all}
case "$mode" in
  all | gpu | build | test | bench) ;;
  *)
    echo "usage: scripts/gpu-check.sh [all|gpu|build|test|bench]" >&2
    exit 2
    ;;
esac

t_start=$(date +%s)
budget=${GPU_CHECK_BUDGET_S:-540}
jobs=${GPU_CHECK_JOBS:-$(nproc)}
arch=${GPU_CHECK_CUDA_ARCH:-90}
device=${GPU_CHECK_DEVICE:-cuda:0}
build=${GPU_CHECK_BUILD_DIR:-$root/build-gpucheck}
carry=${STRATA_CARRY_DIR:-$root/third_party_carry}
shared=$carry/shared
train_steps=${GPU_CHECK_TRAIN_STEPS:-300}
cap_scale=${GPU_CHECK_CAP_SCALE:-1}
python=${PYTHON:-python3}
out=${OUT:-$build/out}
work=$build/gpu-check  # this call's intermediate results
mkdir -p "$out" "$build"
rm -rf "$work"
mkdir -p "$work"
log=$out/gpu-check.log
: >"$log"
: >"$work/stages.tsv"
failed=0
# CMake >= 4 refuses package files that ask for policies older than 3.5 (a safety net; the
# carried ones ask for ranges reaching 3.19+).
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export PYTHONUNBUFFERED=1

say() { echo "gpu-check: $*" | tee -a "$log"; }
elapsed() { echo $(($(date +%s) - t_start)); }
remaining() { echo $((budget - $(elapsed))); }

# record NAME STATUS SECONDS RC NOTE
record() {
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${5//$'\t'/ }" >>"$work/stages.tsv"
  case "$2" in
    pass | "not in this mode") ;;
    *) failed=1 ;;
  esac
}

# stage NAME CAP_SECONDS COMMAND...: runs COMMAND (output to the log) under a timeout of
# min(CAP, what the budget has left less 20 s for the report).
stage() {
  local name=$1 cap=$(($2 * cap_scale))
  shift 2
  local left=$(($(remaining) - 20))
  local limit=$((cap < left ? cap : left))
  if [ "$limit" -lt 15 ]; then
    say "[$name] SKIPPED: out of time (budget ${budget}s, $(elapsed)s used)"
    record "$name" "skipped: out of time" 0 "" "budget ${budget}s exhausted; run this stage in another call"
    return 1
  fi
  say "[$name] start (limit ${limit}s): $*"
  local t0 rc
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  local secs=$(($(date +%s) - t0))
  if [ $rc -eq 0 ]; then
    say "[$name] pass (${secs}s)"
    record "$name" pass "$secs" 0 ""
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    say "[$name] TIMEOUT after ${secs}s"
    record "$name" timeout "$secs" "$rc" "stopped at its ${limit}s limit"
  else
    # The stage's own output: the log since its start line. Its first errors (a build's
    # "FAILED:" steps and compiler errors), then its last lines.
    awk -v s="[$name] start" 'index($0, s) {buf=""; on=1; next} on {buf = buf $0 "\n"} END {printf "%s", buf}' \
      "$log" >"$work/stage-output.txt"
    say "[$name] FAIL (exit $rc, ${secs}s); from its output:"
    {
      grep -E "^FAILED: |error:|undefined reference" "$work/stage-output.txt" | cut -c1-300 | awk '!seen[$0]++' | head -n 15
      echo "..."
      tail -n 20 "$work/stage-output.txt" | cut -c1-300
    } | sed 's/^/    | /'
    record "$name" fail "$secs" "$rc" "exit status $rc"
  fi
  return $rc
}

skip() {  # skip NAME REASON
  say "[$1] SKIPPED: $2"
  record "$1" "skipped: $2" 0 "" "$2"
}

# ---- the machine, cuDNN and NCCL ----
CUDNN_INC="" CUDNN_LIB="" CUDNN_SAY="cudnn: not probed" NCCL_INC="" NCCL_LIB="" NCCL_SAY="nccl: not probed"
probe() {
  say "mode $mode, budget ${budget}s, $jobs jobs, sm_$arch, device $device, build $build"
  {
    echo "== machine =="
    uname -a
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi failed"
    command -v nvcc && nvcc --version | tail -2
    cmake --version | head -1
    ninja --version
    ${CXX:-c++} --version | head -1
    "$python" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
  } >>"$log" 2>&1
  # cuDNN / NCCL: the system's (next to the toolkit), else the nvidia-cudnn-cu13 /
  # nvidia-nccl-cu13 wheels PyTorch brought (site-packages/nvidia/...).
  "$python" - "$work/env.json" "$arch" "$jobs" <<'PY' >>"$log" 2>&1
import glob, json, os, platform, re, shutil, subprocess, sys

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return "error: %s" % e

def version(header, names):
    try:
        text = open(header).read()
    except OSError:
        return None
    parts = []
    for n in names:
        m = re.search(r"#define\s+%s\s+(\d+)" % n, text)
        if not m:
            return None
        parts.append(m.group(1))
    return ".".join(parts)

nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
cuda_root = os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else "/usr/local/cuda"
system_inc = [cuda_root + "/include", "/usr/local/cuda/include", "/usr/include", "/usr/include/x86_64-linux-gnu"]
system_lib = [cuda_root + "/lib64", cuda_root + "/lib", "/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"]

def wheel_dirs(pkg):
    try:
        import importlib
        m = importlib.import_module("nvidia." + pkg)
        return [p for p in getattr(m, "__path__", [])]
    except Exception:  # noqa: BLE001
        pass
    try:
        import nvidia
        return [os.path.join(p, pkg) for p in nvidia.__path__ if os.path.isdir(os.path.join(p, pkg))]
    except Exception:  # noqa: BLE001
        return []

def find(lib, header, version_header, version_names, wheel):
    def pick_lib(dirs):
        for d in dirs:
            cands = sorted(glob.glob(os.path.join(d, "lib%s.so" % lib))) or \
                sorted(glob.glob(os.path.join(d, "lib%s.so.[0-9]*" % lib)), key=len)
            if cands:
                return cands[0]
        return None
    for inc in system_inc:
        if os.path.exists(os.path.join(inc, header)):
            so = pick_lib(system_lib)
            if so:
                return {"source": "system", "include": inc, "library": so,
                        "version": version(os.path.join(inc, version_header), version_names)}
    for d in wheel_dirs(wheel):
        incs = [p for p in glob.glob(os.path.join(d, "**", header), recursive=True)]
        libdirs = sorted({os.path.dirname(p) for p in glob.glob(os.path.join(d, "**", "lib%s.so*" % lib), recursive=True)})
        so = pick_lib(libdirs)
        if incs and so:
            inc = os.path.dirname(incs[0])
            return {"source": "PyTorch wheel nvidia-%s (%s)" % (wheel, d), "include": inc, "library": so,
                    "version": version(os.path.join(inc, version_header), version_names)}
    return {"source": None, "error": "no %s and lib%s.so* on the system nor in site-packages/nvidia/%s" % (header, lib, wheel)}

env = {
    "host": platform.node(),
    "cores": os.cpu_count(),
    "jobs": int(sys.argv[3]),
    "cuda_arch": sys.argv[2],
    "gpu": sh("nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader"),
    "nvcc": nvcc,
    "nvcc_version": sh("%s --version | tail -1" % nvcc) if nvcc else None,
    "cmake": sh("cmake --version | head -1"),
    "ninja": sh("ninja --version"),
    "cxx": sh("${CXX:-c++} --version | head -1"),
    "python": sys.version.split()[0],
}
try:
    import torch
    env["torch"] = torch.__version__
    env["torch_cuda"] = torch.version.cuda
    env["torch_cudnn"] = torch.backends.cudnn.version()
except Exception as e:  # noqa: BLE001
    env["torch"] = "unavailable: %s" % e
env["cudnn"] = find("cudnn", "cudnn.h", "cudnn_version.h", ["CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"], "cudnn")
env["nccl"] = find("nccl", "nccl.h", "nccl.h", ["NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH"], "nccl")
json.dump(env, open(sys.argv[1], "w"), indent=2)
print(json.dumps(env, indent=2))
PY
  # The paths for CMake and for the loader (cuDNN loads its engine libraries at run time).
  eval "$("$python" - "$work/env.json" <<'PY'
import json, os, shlex, sys
env = json.load(open(sys.argv[1]))
for key, var in (("cudnn", "CUDNN"), ("nccl", "NCCL")):
    e = env.get(key) or {}
    print("%s_INC=%s" % (var, shlex.quote(e.get("include") or "")))
    print("%s_LIB=%s" % (var, shlex.quote(e.get("library") or "")))
    print("%s_SAY=%s" % (var, shlex.quote("%s %s from %s (%s)" % (key, e.get("version"), e.get("source"), e.get("library"))
                                           if e.get("library") else "%s NOT FOUND: %s" % (key, e.get("error")))))
PY
)"
  say "$CUDNN_SAY"
  say "$NCCL_SAY"
  for lib in "$CUDNN_LIB" "$NCCL_LIB"; do
    if [ -n "$lib" ]; then export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
  done
}

# ---- build ----
configure() {
  local nvcc_path
  nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  local args=(-S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
    -DSTRATA_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc_path" "-DCMAKE_CUDA_ARCHITECTURES=$arch"
    -DSTRATA_WITH_OPENBLAS=OFF -DSTRATA_WITH_PROTOBUF=OFF -DSTRATA_WITH_GLOO=OFF -DSTRATA_WITH_ZMQ=OFF
    "-DSTRATA_CARRY_DIR=$carry" "-DSTRATA_SHARED_DIR=$shared" -DSTRATA_WERROR=OFF)
  if [ -n "$CUDNN_LIB" ]; then args+=("-DSTRATA_CUDNN_INCLUDE_DIR=$CUDNN_INC" "-DSTRATA_CUDNN_LIBRARY=$CUDNN_LIB"); fi
  if [ -n "$NCCL_LIB" ]; then args+=("-DSTRATA_NCCL_INCLUDE_DIR=$NCCL_INC" "-DSTRATA_NCCL_LIBRARY=$NCCL_LIB"); fi
  stage configure 150 cmake "${args[@]}"
}

configured=""
ensure_built() {  # ensure_built TARGET...: configure once, then build the targets that exist
  if [ -z "$configured" ]; then
    if [ ! -d "$carry/include" ]; then
      say "third_party_carry/ is missing: run scripts/gpu-carry.sh before the device call and carry it"
    fi
    if configure; then configured=ok; else configured=failed; fi
  fi
  if [ "$configured" != ok ]; then
    skip "build($*)" "configure failed"
    return 1
  fi
  local want=() t
  local have
  have=$(ninja -C "$build" -t targets all 2>/dev/null | cut -d: -f1)
  for t in "$@"; do
    if grep -qx "$t" <<<"$have"; then want+=("$t"); else say "target $t is not part of this build"; fi
  done
  [ ${#want[@]} -gt 0 ] || return 1
  # -k 0: build every target that can be built; a stage whose program exists still runs.
  stage "build" 420 cmake --build "$build" -j "$jobs" --target "${want[@]}" -- -k 0
}

bin=$build/bin
have_bin() { [ -x "$bin/$1" ]; }

# ---- test ----
ctest_label() {  # ctest_label LABEL CAP
  local label=$1 cap=$2
  if [ ! -f "$build/CTestTestfile.cmake" ]; then
    skip "ctest $label" "no build"
    return
  fi
  # -L takes a regex: anchored, or "cuda" would also select "cuda-emulation".
  stage "ctest $label" "$cap" ctest --test-dir "$build" -L "^${label}\$" --no-tests=error --output-on-failure \
    -j "$jobs" --timeout "$cap" --output-junit "$work/ctest-$label.xml"
  local summary
  summary=$(grep -E "tests passed|No tests were found" "$log" | tail -n 1)
  [ -n "$summary" ] && say "result ctest $label: $summary"
}

golden() {  # golden DEVICE
  local dev=$1 file=$work/golden-${1//:/_}.txt
  if ! have_bin strata-golden; then
    skip "golden $dev" "strata-golden was not built"
    return
  fi
  stage "golden $dev" 120 bash -c 'set -o pipefail; "$1" --cases "$2" --device "$3" 2>&1 | tee "$4"' _ \
    "$bin/strata-golden" "$shared/golden/cases" "$dev" "$file"
  tail -n 1 "$file" 2>/dev/null | sed "s/^/gpu-check: result golden $dev: /" | tee -a "$log"
}

# PRECISION (default float32): strata-train's --precision; mixed_float16 trains with the
# dynamic loss scale, mixed_bfloat16 without. The report lands as train-cnn-<tag>.json.
train() {  # train DEVICE CAP [PRECISION]
  local dev=$1 cap=$2 precision=${3:-float32} tag=${1//:/_}
  local name="train cnn $dev"
  if [ "$precision" != float32 ]; then
    tag=${tag}_$precision
    name="$name $precision"
  fi
  if ! have_bin strata-train; then
    skip "$name" "strata-train was not built"
    return
  fi
  rm -rf "$work/model-$tag"
  stage "$name" "$cap" "$bin/strata-train" --model cnn --data "mnist:$shared/data/mnist" \
    --strategy one_device --devices "$dev" --precision "$precision" --steps "$train_steps" --steps-per-loop 100 \
    --global-batch 128 --model-dir "$work/model-$tag" --report "$work/train-$tag.json"
  if [ -f "$work/train-$tag.json" ]; then
    # The device tool brings back at most 8 files: the mixed-precision reports travel
    # inside gpu-check.json only.
    [ "$precision" = float32 ] && cp "$work/train-$tag.json" "$out/train-cnn-$tag.json"
    "$python" -c 'import json,sys; r=json.load(open(sys.argv[1])); print("gpu-check: result %s: eval accuracy %.4f, loss %.4f, %.1f steps/s" % (sys.argv[2], r["eval_accuracy"], r["eval_loss"], r.get("steps_per_sec", 0)))' \
      "$work/train-$tag.json" "$name" | tee -a "$log"
  fi
}

# Mirrored over 2 logical GPUs of one device (they reduce in device memory: NCCL refuses
# two ranks on one GPU). The report lands as train-mirrored2_<dev>.json.
train_virtual() {  # train_virtual DEVICE CAP
  local dev=$1 cap=$2 tag=mirrored2_${1//:/_}
  if ! have_bin strata-train; then
    skip "train $dev x2 logical" "strata-train was not built"
    return
  fi
  rm -rf "$work/model-$tag"
  stage "train cnn mirrored $dev x2 logical" "$cap" "$bin/strata-train" --model cnn --data "mnist:$shared/data/mnist" \
    --strategy mirrored --devices "$dev" --virtual-gpus 2 --steps "$train_steps" --steps-per-loop 100 \
    --global-batch 128 --model-dir "$work/model-$tag" --report "$work/train-$tag.json"
  if [ -f "$work/train-$tag.json" ]; then
    cp "$work/train-$tag.json" "$out/train-cnn-$tag.json"
    "$python" -c 'import json,sys; r=json.load(open(sys.argv[1])); print("gpu-check: result train cnn mirrored %s x2 logical: eval accuracy %.4f, loss %.4f, %.1f steps/s, %d replicas" % (sys.argv[2], r["eval_accuracy"], r["eval_loss"], r.get("steps_per_sec", 0), r.get("replicas", 0)))' \
      "$work/train-$tag.json" "$dev" | tee -a "$log"
  fi
}

# ---- bench ----
bench_strata() {
  if ! have_bin strata-bench; then
    skip "strata-bench gpu" "strata-bench was not built"
    return
  fi
  local quick=()
  if [ "${GPU_CHECK_QUICK:-0}" = 1 ]; then quick=(--quick); fi
  stage "strata-bench gpu" 240 "$bin/strata-bench" gpu --device "$device" "${quick[@]}" \
    --json "$work/strata-bench-gpu.json"
  [ -f "$work/strata-bench-gpu.json" ] && cp "$work/strata-bench-gpu.json" "$out/"
}

bench_torch() {
  local quick=()
  if [ "${GPU_CHECK_QUICK:-0}" = 1 ]; then quick=(--quick); fi
  stage "torch gpu" 180 "$python" "$root/bench/compare/torch_gpu.py" --device "$device" "${quick[@]}" \
    --json "$work/torch-gpu.json"
  [ -f "$work/torch-gpu.json" ] && cp "$work/torch-gpu.json" "$out/"
}

# ---- the run ----
probe
gpu_test_targets=(strata_cuda_tests strata_cuda_nccl_tests strata-golden strata-train)
test_targets=("${gpu_test_targets[@]}" strata_cuda_emulation_tests)
bench_targets=(strata-bench)

gpu_tests() {  # what needs the GPU: its ctest label, golden cases and training runs
  ctest_label cuda 180
  golden "$device"
  train "$device" 150
  train_virtual "$device" 150
  train "$device" 100 mixed_float16
  train "$device" 100 mixed_bfloat16
}

cpu_tests() {  # the CPU comparisons and the emulation tests (CI runs these too)
  golden cpu
  train cpu:0 90
  ctest_label cuda-emulation 240
}

case "$mode" in
  build)
    ensure_built "${test_targets[@]}" "${bench_targets[@]}"
    ;;
  test)
    ensure_built "${test_targets[@]}"
    gpu_tests
    cpu_tests
    ;;
  bench)
    ensure_built "${bench_targets[@]}"
    bench_strata
    bench_torch
    ;;
  gpu)
    ensure_built "${gpu_test_targets[@]}" "${bench_targets[@]}"
    gpu_tests
    bench_strata
    bench_torch
    ;;
  all)
    ensure_built "${test_targets[@]}" "${bench_targets[@]}"
    gpu_tests
    bench_strata
    bench_torch
    cpu_tests
    ;;
esac

# ---- the report ----
say "report: $(elapsed)s used of ${budget}s"
cp "$work/stages.tsv" "$out/gpu-check-stages.tsv" 2>/dev/null
if ! "$python" "$root/scripts/gpu_check_report.py" "$work" "$out/gpu-check.json" 2>&1 | tee -a "$log"; then
  say "the JSON report could not be written"
  failed=1
fi
echo
echo "==== gpu-check $mode: stages ($(elapsed)s; log $log, JSON $out/gpu-check.json) ===="
awk -F'\t' '{ printf "  %-28s %-26s %5ss  %s\n", $1, $2, $3, $5 }' "$work/stages.tsv"
grep -h "^gpu-check: result\|^gpu-check: cudnn\|^gpu-check: nccl" "$log" | sed 's/^gpu-check: /  /'
if [ $failed -ne 0 ]; then
  echo "gpu-check: FAILED (see the stages above)"
  exit 1
fi
echo "gpu-check: all stages passed"
