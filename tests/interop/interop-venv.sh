#!/usr/bin/env bash
# Creates, once, the interop tests' virtual environment and prints its python on stdout.
# Location: $STRATA_INTEROP_VENV, default .venv-interop/ at the repository root
# (git-ignored), reused while its stamp matches tests/interop/requirements.txt.
#
# Made from Debian's /usr/bin/python3 with its system site packages visible, so that
# Debian's python3-torch, when installed, serves the torch-flavoured safetensors checks
# (PyPI's torch wheel is several GB); every pinned package is installed into the
# environment itself (--ignore-installed), so Debian's own numpy or protobuf never stand in
# for a pin. Concurrent callers (ctest -j, several build folders) serialise on a lock.
# Exit status 77 (CTest's "skipped") with a message when the package index is unreachable.
set -euo pipefail
here=$(cd -P "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${STRATA_INTEROP_VENV:-$root/.venv-interop}
requirements=$here/requirements.txt
python=/usr/bin/python3
stamp=$(sha256sum "$requirements" | cut -d' ' -f1)

mkdir -p "$(dirname "$venv")"
exec 9> "$venv.lock"
flock -w 900 9 || { echo "interop-venv: waited 15 min for $venv.lock" >&2; exit 1; }

if [[ -f $venv/.strata-stamp && $(cat "$venv/.strata-stamp") == "$stamp" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

index=${PIP_INDEX_URL:-https://pypi.org/simple/}
if ! "$python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=15)" "$index" \
  2> /dev/null; then
  echo "skipped: the Python package index ($index) is unreachable; the interop tests need" \
    "tensorboard, safetensors and numpy from it (tests/interop/requirements.txt)" >&2
  exit 77
fi

echo "interop-venv: creating $venv (tests/interop/requirements.txt)" >&2
rm -rf "$venv"
"$python" -m venv --system-site-packages "$venv"
nice -n 10 "$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q \
  --ignore-installed -r "$requirements" >&2
"$venv/bin/python" -c "import numpy, ml_dtypes, safetensors, tensorboard" >&2
echo "$stamp" > "$venv/.strata-stamp"
echo "$venv/bin/python"
