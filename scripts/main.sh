#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install dependencies, build, and run
# `oasiskv eval --sweep` on the default model and text (../shared/), writing the
# table to stdout and JSON/CSV/PNG under results/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PATH:/usr/local/cuda/bin"
[ -f build/build.ninja ] || meson setup build --buildtype=release >/dev/null
ninja -C build >/dev/null
mkdir -p results
./build/tools/oasiskv info
./build/tools/oasiskv eval --sweep --json results/sweep.json --csv results/sweep.csv --plot results/sweep.png "$@"
