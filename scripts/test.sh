#!/usr/bin/env bash
# Builds strata and runs every test: the normal build's suite (warnings as errors; it
# includes install/consumer, which installs the build into a temporary prefix and builds
# and runs examples/consumer against it, scripts/check-install.sh), then
# the suite under AddressSanitizer + UndefinedBehaviorSanitizer, then the concurrency
# tests (replica threads, prefetch, collectives) under ThreadSanitizer. Closes with a table
# of each stage's wall time.
# Usage: scripts/test.sh   (from anywhere; installs missing Debian packages first)
set -euo pipefail
# -P: the physical path, as CMake and the compiler see it (CCACHE_BASEDIR must match it).
cd -P "$(dirname "$0")/.."
bash scripts/install-deps.sh

# Compiler cache shared by every checkout on this machine (CMake uses ccache when found):
# ccache rewrites absolute paths under the checkout to relative ones, and leaves the build
# directory out of the hash (it is in the -g1 debug info), so a fresh clone elsewhere hits
# what an earlier checkout compiled. The three builds need several GB: raise a smaller
# configured limit (ccache's default is 5 GB), never lower a larger one.
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
if command -v ccache > /dev/null; then
  limit=$(ccache -k max_size 2> /dev/null | tr -d ' B' | numfmt --from=iec 2> /dev/null) || limit=
  if [[ -z $limit ]] || ((limit != 0 && limit < 20 * 1024 ** 3)); then export CCACHE_MAXSIZE=20G; fi
fi

jobs=${STRATA_BUILD_JOBS:-$(nproc)}
# Unity build (cmake/StrataUnity.cmake): each folder's sources compile in batches of 8
# (measured: the normal build's compile CPU time 1000 s -> 650 s).
common=(-G Ninja -DSTRATA_WERROR=ON -DSTRATA_UNITY_BUILD=ON)
# Sanitizer builds: -O1 with line tables only (-g1): enough for symbolized stack traces.
# Measured under ASan+UBSan: -O1 compiles in 40% less CPU time than -O2, and the tests run
# as fast (they are dominated by process start-up, not by optimised code). The CUDA
# backend is built in the normal build only.
sanitizer_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
  -DSTRATA_CUDA=OFF -DSTRATA_BUILD_BENCH=OFF)
# CTest's -L/-LE take regular expressions matched against each label: anchor them, so that
# "cuda" does not also match "cuda-emulation".
not_slow=(-LE "^(slow|cuda)$")

# Wall time of each step, printed as a table at the end (or when a step fails).
times=()
step_start=$SECONDS
record() {  # record STAGE STEP: the time since the previous record
  times+=("$1|$2|$((SECONDS - step_start))")
  step_start=$SECONDS
}
print_times() {
  local total=0 row stage step s
  echo "== stage times (wall) =="
  printf '%-24s %-16s %9s\n' stage step time
  for row in "${times[@]}"; do
    IFS='|' read -r stage step s <<< "$row"
    printf '%-24s %-16s %5dm%02ds\n' "$stage" "$step" $((s / 60)) $((s % 60))
    total=$((total + s))
  done
  printf '%-24s %-16s %5dm%02ds\n' total "" $((total / 60)) $((total % 60))
}
trap 'status=$?; if ((status != 0)); then print_times; fi' EXIT

echo "== normal build =="
cmake -S . -B build "${common[@]}" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=AUTO
cmake --build build -j "$jobs"
record normal configure+build
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600
record normal tests

echo "== AddressSanitizer + UndefinedBehaviorSanitizer =="
cmake -S . -B build-asan "${common[@]}" "${sanitizer_flags[@]}" -DSTRATA_SANITIZE="address;undefined"
# Only what CTest runs (tests/CMakeLists.txt: strata_test_programs), not every example.
cmake --build build-asan -j "$jobs" --target strata_test_programs
record asan+ubsan configure+build
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900 "${not_slow[@]}"
record asan+ubsan tests

echo "== ThreadSanitizer (concurrency tests) =="
cmake -S . -B build-tsan "${common[@]}" "${sanitizer_flags[@]}" -DSTRATA_SANITIZE=thread
# The CUDA kernels' emulation tests run here too: the emulator runs every CUDA thread as a
# host thread, so TSan sees a missing __syncthreads or a racy kernel as a data race.
cmake --build build-tsan -j "$jobs" --target strata_data_tests strata_distribute_tests strata_core_tests \
  strata_cuda_emulation_tests
record tsan configure+build
# libzmq is not instrumented: tests/tsan_suppressions.txt drops reports whose stacks pass
# through it (its message hand-off uses atomics TSan cannot see).
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan_suppressions.txt" \
  ctest --test-dir build-tsan --output-on-failure -j "$jobs" --timeout 900 -L "^(data|distribute|core|cuda-emulation)$" \
  "${not_slow[@]}"
record tsan tests
print_times
echo "== all tests passed =="
