#!/usr/bin/env bash
# Installs a built strata into a temporary prefix and builds and runs the out-of-tree
# consumer (examples/consumer) against it: through find_package(strata) / strata::strata,
# then the same object linked through pkg-config's strata.pc. Also checks that the
# installed headers compile with only the prefix's include/ on the path.
# Usage: scripts/check-install.sh BUILD_DIR   (a configured and built tree; CTest runs it
#        as install/consumer, label `install`). Leaves nothing behind.
set -euo pipefail
if (($# != 1)) || [[ ! -f $1/CMakeCache.txt ]]; then
  echo "usage: $0 BUILD_DIR (a configured and built strata build directory)" >&2
  exit 2
fi
src=$(cd -P "$(dirname "$0")/.." && pwd)
build=$(cd -P "$1" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/strata-check-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

echo "== cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in include/strata/strata.h include/strata/core/tensor.h lib/cmake/strata/strataConfig.cmake \
  lib/cmake/strata/strataConfigVersion.cmake lib/cmake/strata/strataTargets.cmake lib/pkgconfig/strata.pc; do
  [[ -f $prefix/$f ]] || { echo "check-install: $f was not installed" >&2; exit 1; }
done
# Only the engine's folders are public: no tests, bench, tools or kernels headers.
for d in tests bench tools kernels; do
  [[ ! -e $prefix/include/strata/$d ]] || { echo "check-install: include/strata/$d must not be installed" >&2; exit 1; }
done

# The consumer's compile is cached like the engine's (ccache's base directory is the
# work directory, so the temporary path does not change the hash).
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$work CCACHE_NOHASHDIR=1
fi
echo "== consumer: find_package(strata) + strata::strata"
cmake -S "$src/examples/consumer" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
grep "strata .* from" "$work/configure.log" || true
cmake --build "$work/consumer" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
"$work/consumer/strata_consumer"

echo "== consumer: pkg-config strata"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
obj=$(find "$work/consumer" -name 'main.cc.o' | head -n 1)
[[ -n $obj ]] || { echo "check-install: the consumer's object file was not found" >&2; exit 1; }
# shellcheck disable=SC2046  # pkg-config's output is a list of flags
c++ -o "$work/consumer_pc" "$obj" $(pkg-config --libs strata)
"$work/consumer_pc"
# shellcheck disable=SC2046
echo '#include <strata/core/tensor.h>' | c++ $(pkg-config --cflags strata) -fsyntax-only -x c++ -
echo "check-install: OK"
