#!/usr/bin/env bash
# Fills third_party_carry/ (git-ignored) with what a bare lent GPU machine lacks, so that
# scripts/gpu-check.sh can build and run there. Run it HERE (a Debian machine with
# scripts/install-deps.sh's packages), before calling the device tool with
# carry=["third_party_carry"] (README: "Checking the CUDA backend on a lent GPU").
#
#   third_party_carry/include, lib/, share/   Eigen 3.4, Catch2 2.x (single header, CMake
#                                             files, Catch2WithMain), CLI11, nlohmann-json,
#                                             zlib (headers + static libz.a), libsodium
#                                             (headers + static libsodium.a) — each laid out
#                                             as its Debian package installs it under /usr,
#                                             so its CMake config files work from here
#   third_party_carry/shared/golden           ../shared/golden (strata-golden's cases)
#   third_party_carry/shared/data/mnist       ../shared/data/mnist (IDX files)
#   third_party_carry/licenses/               the packages' Debian copyright files
#   third_party_carry/MANIFEST.txt            package versions, sizes
#
# CMake finds these only when the system has none (cmake/StrataDependencies.cmake,
# STRATA_CARRY_DIR). OpenBLAS, protobuf, Gloo and ZeroMQ are not carried: gpu-check.sh
# builds with them switched off. Everything carried must stay well under the device
# tool's 64 MiB (the working tree travels too); the script fails above 60 MiB.
#
# Usage: scripts/gpu-carry.sh [--shared DIR]   (default DIR: ../shared next to the repo)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
shared=$(cd "$root/.." && pwd)/shared
if [ "${1:-}" = "--shared" ]; then shared=$2; fi
carry=$root/third_party_carry

# Must be git-ignored, or it would travel twice (and be committed by accident).
if ! git check-ignore -q "third_party_carry/"; then
  echo "gpu-carry: $carry is not git-ignored (add /third_party_carry/ to .gitignore)" >&2
  exit 1
fi

need() {  # need PATH...: every path must exist
  for p in "$@"; do
    if [ ! -e "$p" ]; then
      echo "gpu-carry: $p is missing (run scripts/install-deps.sh)" >&2
      exit 1
    fi
  done
}
need /usr/include/eigen3/Eigen/Core /usr/share/eigen3/cmake/Eigen3Config.cmake \
  /usr/include/catch2/catch.hpp /usr/lib/cmake/Catch2/Catch2Config.cmake /usr/lib/libCatch2WithMain.a \
  /usr/include/CLI/CLI.hpp /usr/share/cmake/CLI11/CLI11Config.cmake \
  /usr/include/nlohmann/json.hpp /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake \
  /usr/include/zlib.h /usr/include/zconf.h /usr/lib/x86_64-linux-gnu/libz.a \
  /usr/include/sodium.h /usr/include/sodium /usr/lib/x86_64-linux-gnu/libsodium.a \
  "$shared/golden/cases" "$shared/data/mnist"

rm -rf "$carry"
mkdir -p "$carry"/{include,lib/cmake,share/cmake,share/eigen3,shared/data,licenses}

# Header-only packages, in the layout their CMake files expect (relative to the prefix).
cp -a /usr/include/eigen3 "$carry/include/"
cp -a /usr/share/eigen3/cmake "$carry/share/eigen3/"
cp -a /usr/include/catch2 "$carry/include/"
cp -a /usr/lib/cmake/Catch2 "$carry/lib/cmake/"
cp -a /usr/lib/libCatch2WithMain.a "$carry/lib/"  # named by Catch2's targets file (unused by strata)
cp -a /usr/include/CLI "$carry/include/"
cp -a /usr/share/cmake/CLI11 "$carry/share/cmake/"
cp -a /usr/include/nlohmann "$carry/include/"
cp -a /usr/share/cmake/nlohmann_json "$carry/share/cmake/"
# zlib: the headers and the static library (position-independent in Debian's build), so
# that strata's MNIST reader links where zlib1g-dev is absent.
cp -a /usr/include/zlib.h /usr/include/zconf.h "$carry/include/"
cp -a /usr/lib/x86_64-linux-gnu/libz.a "$carry/lib/"
# libsodium: job authentication (docs/SECURITY.md); static and position-independent too.
cp -a /usr/include/sodium.h /usr/include/sodium "$carry/include/"
cp -a /usr/lib/x86_64-linux-gnu/libsodium.a "$carry/lib/"

for pkg in libeigen3-dev catch2 libcli11-dev nlohmann-json3-dev zlib1g-dev libsodium-dev; do
  if [ -f "/usr/share/doc/$pkg/copyright" ]; then cp "/usr/share/doc/$pkg/copyright" "$carry/licenses/$pkg.copyright"; fi
done

# ../shared does not travel with the repository: the golden cases and MNIST do, here.
cp -a "$shared/golden" "$carry/shared/"
mkdir -p "$carry/shared/data"
cp -a "$shared/data/mnist" "$carry/shared/data/"
chmod -R u+w "$carry"

{
  echo "third_party_carry: filled by scripts/gpu-carry.sh on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "packages:"
  dpkg-query -W -f='  ${Package} ${Version}\n' libeigen3-dev catch2 libcli11-dev nlohmann-json3-dev zlib1g-dev libsodium-dev 2>/dev/null || true
  echo "shared: $shared ($(ls "$shared/golden/cases" | wc -l) golden case files; mnist: $(ls "$shared/data/mnist" | tr '\n' ' '))"
  echo "sizes:"
  du -sh "$carry"/include/* "$carry"/lib "$carry"/shared/golden "$carry"/shared/data/mnist | sed "s|$carry/|  |"
} >"$carry/MANIFEST.txt"

carry_kib=$(du -sk "$carry" | cut -f1)
tree_kib=$(git ls-files -co --exclude-standard -z | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
echo "  total: ${carry_kib} KiB carried + ${tree_kib} KiB working tree" >>"$carry/MANIFEST.txt"
cat "$carry/MANIFEST.txt"
if [ $((carry_kib + tree_kib)) -gt $((60 * 1024)) ]; then
  echo "gpu-carry: ${carry_kib} KiB + ${tree_kib} KiB is over 60 MiB; the device tool carries at most 64 MiB" >&2
  exit 1
fi
echo "gpu-carry: done. Next: the device tool's run with carry=[\"third_party_carry\"] and command \"bash scripts/gpu-check.sh all\""
