#!/usr/bin/env bash
# Install dependencies, build the reference CPU configuration with --werror and
# run the whole test suite (GPU backends compiled in are reported as skipped
# where no GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PATH:/usr/local/cuda/bin"
builddir="${OKV_BUILD_DIR:-build-test}"
[ -f "$builddir/build.ninja" ] || meson setup "$builddir" --werror "$@" >/dev/null
ninja -C "$builddir"
meson test -C "$builddir" --print-errorlogs --num-processes 2
