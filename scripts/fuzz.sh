#!/usr/bin/env bash
# Fuzzes strata's parsers of untrusted input with libFuzzer (clang from Debian): configures
# a clang build (build-fuzz-clang, -DSTRATA_FUZZ=ON), builds every target of fuzz/ and runs
# each for SECONDS (default 60) from a scratch copy of its seed corpus (fuzz/corpus/<name>),
# so the committed corpus stays small. A crash, sanitizer report, leak, timeout or
# out-of-memory input is saved under $FUZZ_FINDINGS (default: $OUT/fuzz-findings when $OUT
# is set, else fuzz/findings) and the script exits non-zero once every target has run.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (TARGET: idx, safetensors, ... as in
#        fuzz/CMakeLists.txt; default all)
# Environment: FUZZ_JOBS (build parallelism), FUZZ_PARALLEL (targets run at once, default 1),
# FUZZ_ARGS (extra libFuzzer flags).
# Not part of CI (scripts/test.sh replays the committed corpora instead, label fuzz-replay).
set -euo pipefail
cd -P "$(dirname "$0")/.."
root=$PWD

seconds=${1:-60}
shift || true
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds < 1)); then
  echo "fuzz.sh: SECONDS must be a positive integer, got '$seconds'" >&2
  exit 2
fi

# clang-14 and its compiler-rt (libFuzzer, the sanitizer runtimes): Debian's clang-14 and
# libclang-rt-14-dev.
need=()
command -v clang++-14 > /dev/null || need+=(clang-14)
compgen -G "/usr/lib/llvm-14/lib/clang/14*/lib/linux/libclang_rt.fuzzer-x86_64.a" > /dev/null || need+=(libclang-rt-14-dev)
if ((${#need[@]})); then
  echo "fuzz.sh: installing ${need[*]}" >&2
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 update -q
  "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${need[@]}"
fi
bash scripts/install-deps.sh

export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
build=$root/build-fuzz-clang
# -O1 -g: libFuzzer's recommended optimisation, with symbolized stack traces. Only the
# fuzz targets and the parser sources they need are built (fuzz/CMakeLists.txt).
mkdir -p "$build"
CXX=clang++-14 CC=clang-14 cmake -S . -B "$build" -G Ninja -DSTRATA_FUZZ=ON -DSTRATA_CUDA=OFF \
  -DSTRATA_WERROR=OFF -DSTRATA_BUILD_BENCH=OFF -DSTRATA_NATIVE_ARCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" -j "${FUZZ_JOBS:-$(nproc)}" --target strata_fuzzers

all_targets=()
for f in fuzz/*_fuzz.cc; do
  name=$(basename "$f" _fuzz.cc)
  all_targets+=("$name")
done
targets=("$@")
((${#targets[@]})) || targets=("${all_targets[@]}")

if [[ -n ${FUZZ_FINDINGS:-} ]]; then
  findings=$FUZZ_FINDINGS
elif [[ -n ${OUT:-} ]]; then
  findings=$OUT/fuzz-findings
else
  findings=$root/fuzz/findings
fi
mkdir -p "$findings"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/strata-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# Runs one target; writes its summary line to $scratch/<name>.summary.
run_target() {
  local name=$1 exe=$build/bin/${1}_fuzz corpus=$scratch/$1 log=$findings/$1.log status=0 execs rate
  mkdir -p "$corpus"
  cp -r fuzz/corpus/"$name"/. "$corpus"/
  echo "== $name: ${seconds}s (log: $log) =="
  # -rss_limit_mb: the parsers must bound what a small input makes them allocate.
  # -timeout: one input may take at most 10 s. -max_len: inputs up to 64 KiB.
  # shellcheck disable=SC2086
  "$exe" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$findings/$name-" ${FUZZ_ARGS:-} > "$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if ((status != 0)); then
    printf '%-15s %6ss %10s execs %7s/s  FAILED (exit %d): see %s\n' "$name" "$seconds" "${execs:-?}" \
      "${rate:-?}" "$status" "$log" > "$scratch/$name.summary"
    grep -m1 -E "ERROR: |runtime error|terminate called|deadly signal" "$log" >&2 || tail -20 "$log" >&2
  else
    printf '%-15s %6ss %10s execs %7s/s  ok\n' "$name" "$seconds" "${execs:-?}" "${rate:-?}" \
      > "$scratch/$name.summary"
  fi
}

for name in "${targets[@]}"; do
  if [[ ! -x $build/bin/${name}_fuzz ]]; then
    echo "fuzz.sh: no target '$name' (have: ${all_targets[*]})" >&2
    exit 2
  fi
done
# FUZZ_PARALLEL targets at a time (default 1: one after the other).
parallel=${FUZZ_PARALLEL:-1}
running=0
for name in "${targets[@]}"; do
  if ((running >= parallel)); then
    wait -n || true
    running=$((running - 1))
  fi
  run_target "$name" &
  running=$((running + 1))
done
wait

failed=()
echo "== fuzz summary (findings under $findings) =="
for name in "${targets[@]}"; do
  cat "$scratch/$name.summary"
  grep -q FAILED "$scratch/$name.summary" && failed+=("$name")
done
if ((${#failed[@]})); then
  echo "fuzz.sh: findings in: ${failed[*]}" >&2
  exit 1
fi
