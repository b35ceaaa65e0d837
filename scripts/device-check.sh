#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA GPU and nvcc: configures a build with
# the CUDA backend (-Dcuda=enabled -Dhip=disabled), builds it, runs the CUDA test
# suite, `oasiskv info` and, when the CLI has it, `oasiskv bench kernels --device
# cuda` (its failure does not fail the check). Every log goes to the directory
# given as $1, else $OKV_DEVICE_LOG_DIR, else ./device-logs.
#
# Environment: OKV_DEVICE_BUILD_DIR (default build-device), NVCC_ARCH (default:
# the option's default, sm_80,sm_90), OKV_DEVICE_JOBS (ninja -j, default: all CPUs),
# OKV_DEVICE_BENCH_TIMEOUT_S (default 300).
# Exit status: 0 when the build and the CUDA suite passed, 1 otherwise.
set -u
cd "$(dirname "$0")/.."

logdir="${1:-${OKV_DEVICE_LOG_DIR:-./device-logs}}"
builddir="${OKV_DEVICE_BUILD_DIR:-build-device}"
jobs="${OKV_DEVICE_JOBS:-$(nproc 2>/dev/null || echo 2)}"
export PATH="/usr/local/cuda/bin:$PATH"
mkdir -p "$logdir"
summary="$logdir/summary.txt"
: > "$summary"

note() { echo "$*" | tee -a "$summary"; }
# step NAME LOGFILE COMMAND...: runs the command with its output in LOGFILE and
# records "NAME: ok|FAILED (rc) in Ns".
step() {
  local name="$1" log="$2"
  shift 2
  local t0=$SECONDS
  "$@" > "$logdir/$log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then
    note "$name: ok ($((SECONDS - t0)) s, $log)"
  else
    note "$name: FAILED rc=$rc ($((SECONDS - t0)) s, see $log)"
  fi
  return $rc
}

note "OasisKV device check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -m)"
{
  echo "== nvidia-smi"; nvidia-smi 2>&1 || echo "nvidia-smi not available"
  echo "== nvcc"; nvcc --version 2>&1 || echo "nvcc not found"
  echo "== libcuda"; ldconfig -p 2>/dev/null | grep -E 'libcuda\.so' || echo "libcuda.so not in the ldconfig cache"
  echo "== git"; git log -1 --oneline 2>&1 || true
} > "$logdir/environment.log" 2>&1
note "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || echo unknown)"

failed=0
setup_args=(-Dcuda=enabled -Dhip=disabled -Dbuildtype=release)
[ -n "${NVCC_ARCH:-}" ] && setup_args+=("-Dnvcc_arch=$NVCC_ARCH")
if [ -f "$builddir/build.ninja" ]; then
  step "configure" configure.log meson setup --reconfigure "$builddir" "${setup_args[@]}" || failed=1
else
  step "configure" configure.log meson setup "$builddir" "${setup_args[@]}" || failed=1
fi
if [ $failed -eq 0 ]; then
  step "build" build.log ninja -C "$builddir" -j "$jobs" || failed=1
fi
if [ $failed -eq 0 ]; then
  step "test --suite cuda" test-cuda.log meson test -C "$builddir" --suite cuda --print-errorlogs \
    --num-processes 1 || failed=1
  cp "$builddir/meson-logs/testlog.txt" "$logdir/testlog-cuda.txt" 2>/dev/null || true
  grep -E '^(Ok|Fail|Skipped|Timeout|Expected Fail|Unexpected Pass):' "$logdir/test-cuda.log" | tee -a "$summary"
  cli="$builddir/tools/oasiskv"
  if [ -x "$cli" ]; then
    step "oasiskv info" info.log "$cli" info || failed=1
    # The option exists when its spelling is in the CLI binary (no trial run needed).
    if grep -aq -- '--device' "$cli"; then
      step "oasiskv bench kernels --device cuda (informational)" bench-kernels.log \
        timeout "${OKV_DEVICE_BENCH_TIMEOUT_S:-300}" "$cli" bench kernels --device cuda || true
    else
      note "oasiskv bench kernels --device: not in this CLI, skipped"
    fi
  else
    note "oasiskv CLI not built, info/bench skipped"
  fi
fi

if [ $failed -eq 0 ]; then note "RESULT: PASS"; else note "RESULT: FAIL"; fi
echo "logs in $logdir"
exit $failed
