#!/usr/bin/env bash
# Tries scripts/gpu-check.sh HERE, on a Debian machine without a GPU, in a private mount
# namespace that looks like the lent GPU machine to strata's build: Debian's Eigen, Catch2,
# CLI11, nlohmann-json, zlib and libsodium headers and dev libraries, OpenBLAS, protobuf, Gloo and ZeroMQ
# are hidden, and cuDNN/NCCL exist only as PyTorch's wheels ship them (a fake
# site-packages/nvidia/{cudnn,nccl} on PYTHONPATH, versioned .so names only). What it
# proves: gpu-carry.sh's folder and the build switches suffice to configure and build, the
# cuDNN/NCCL probe finds the wheels, and every stage runs, reports and hands over. The GPU
# stages fail here (no device), as does torch_gpu.py (no torch).
#
#   sudo bash scripts/gpu-check-sim.sh [all|build|test|bench]
#
# Needs root (unshare -m, bind mounts; nothing outside the namespace changes) and
# /usr/local/cuda-13.0. Hard-linked copies of /usr/include, /usr/lib/x86_64-linux-gnu and
# the toolkit's include/lib go to $GPU_CHECK_SIM_DIR (default /tmp/strata-gpu-sim, same
# file system as /usr). Slow machines: GPU_CHECK_JOBS, GPU_CHECK_BUDGET_S (default here
# 14400) and GPU_CHECK_CAP_SCALE (default here 30) are passed through; $OUT defaults to
# build-gpucheck-sim/out.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
sim=${GPU_CHECK_SIM_DIR:-/tmp/strata-gpu-sim}
cuda=/usr/local/cuda-13.0
if [ "$(id -u)" -ne 0 ]; then
  echo "gpu-check-sim: needs root (unshare -m and bind mounts)" >&2
  exit 2
fi
if [ ! -d "$sim/usr-include" ]; then
  mkdir -p "$sim"
  cp -al /usr/include "$sim/usr-include"
  (cd "$sim/usr-include" && rm -rf eigen3 catch2 CLI nlohmann zlib.h zconf.h sodium.h sodium google gloo zmq.h zmq.hpp zmq_addon.hpp \
    zmq_utils.h x86_64-linux-gnu/cblas* x86_64-linux-gnu/f77blas.h x86_64-linux-gnu/openblas* x86_64-linux-gnu/lapack*)
  cp -al /usr/lib/x86_64-linux-gnu "$sim/usr-lib"
  (cd "$sim/usr-lib" && rm -rf libz.so libz.a libsodium.so libsodium.a libprotobuf* libprotoc* openblas-pthread openblas-serial libopenblas* \
    libblas* liblapack* libgloo* libzmq.so libzmq.a cmake/openblas pkgconfig/zlib.pc pkgconfig/protobuf* \
    pkgconfig/libzmq.pc pkgconfig/openblas* pkgconfig/blas*)
  cp -al "$cuda/include" "$sim/cuda-include"
  cp -al "$cuda/lib" "$sim/cuda-lib"
  site=$sim/site/nvidia
  mkdir -p "$site/cudnn/include" "$site/cudnn/lib" "$site/nccl/include" "$site/nccl/lib" "$sim/empty"
  mv "$sim"/cuda-include/cudnn* "$site/cudnn/include/"
  mv "$sim"/cuda-include/nccl* "$site/nccl/include/"
  mv "$sim"/cuda-lib/libcudnn*.so.9 "$site/cudnn/lib/"
  mv "$sim/cuda-lib/libnccl.so.2" "$site/nccl/lib/"
  rm -f "$sim"/cuda-lib/libcudnn* "$sim"/cuda-lib/libnccl*
  touch "$site/cudnn/__init__.py" "$site/nccl/__init__.py"
fi
export PYTHONPATH=$sim/site
export OUT=${OUT:-$root/build-gpucheck-sim/out}
export GPU_CHECK_BUILD_DIR=${GPU_CHECK_BUILD_DIR:-$root/build-gpucheck-sim}
export GPU_CHECK_BUDGET_S=${GPU_CHECK_BUDGET_S:-14400} GPU_CHECK_CAP_SCALE=${GPU_CHECK_CAP_SCALE:-30}
exec unshare -m bash -c '
  set -e
  sim=$1; cuda=$2; shift 2
  mount --make-rprivate /
  mount --bind "$sim/usr-include" /usr/include
  mount --bind "$sim/usr-lib" /usr/lib/x86_64-linux-gnu
  mount --bind "$sim/cuda-include" "$cuda/include"
  mount --bind "$sim/cuda-lib" "$cuda/lib"
  for d in /usr/share/eigen3 /usr/lib/cmake/Catch2 /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json \
           /usr/share/cmake/Gloo /usr/share/cmake/cppzmq; do
    if [ -d "$d" ]; then mount --bind "$sim/empty" "$d"; fi
  done
  exec bash scripts/gpu-check.sh "$@"' bash "$sim" "$cuda" "${1:-all}"
