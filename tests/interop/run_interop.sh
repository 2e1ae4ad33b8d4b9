#!/usr/bin/env bash
# CTest's entry to the interop checks: run_interop.sh SUITE INTEROP_PROGRAM STRATA_TRAIN WORKDIR.
# Creates or reuses the pinned virtual environment, then runs check_interop.py in it.
set -euo pipefail
here=$(cd -P "$(dirname "$0")" && pwd)
suite=$1 program=$2 strata_train=$3 workdir=$4
python=$(bash "$here/interop-venv.sh")  # exits 77 (skipped) when the index is unreachable
rm -rf "$workdir"
mkdir -p "$workdir"
exec "$python" "$here/check_interop.py" "$suite" --program "$program" --strata-train "$strata_train" \
  --workdir "$workdir"
