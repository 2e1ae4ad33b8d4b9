#!/usr/bin/env bash
# Installs the Debian packages strata's build and tests need. Idempotent: when every
# package is already present it does nothing (no apt-get update, no network).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libeigen3-dev libopenblas-dev libopenblas0-pthread
  catch2 zlib1g-dev nlohmann-json3-dev libcli11-dev
  libgloo-dev
  libzmq3-dev cppzmq-dev
  libsodium-dev
  libprotobuf-dev protobuf-compiler
  python3-protobuf python3-crc32c python3-numpy
  python3-venv  # tests/interop: the pinned virtual environment of the interop tests
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 update -q
"${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"
