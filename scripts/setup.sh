#!/usr/bin/env bash
# Installs what OasisKV needs to build and test on Debian 12 (run as root or with sudo).
# Idempotent: packages already present are left as they are.
set -euo pipefail

pkgs=(meson ninja-build pkg-config gcc libc6-dev libcmocka-dev libjson-c-dev gnuplot-nox
      clang-format clang libclang-rt-14-dev binutils  # style check, libFuzzer harnesses, nm
      libucx-dev ucx-utils   # remote tier (UCX) and ucx_perftest for bench remote
      libpcre2-dev           # Unicode-aware pre-tokenizer split rules (GGUF byte-level BPE)
      iproute2)              # ip netns for the two-host remote test
# HIP toolchain for compiling the HIP backend (no AMD GPU is needed to compile).
if [ "${OKV_WITH_HIP:-1}" = "1" ]; then
  pkgs+=(hipcc libamdhip64-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# nvcc is not a Debian package here; the CUDA toolkit lives at /usr/local/cuda on these machines.
if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: nvcc found at /usr/local/cuda/bin"
else
  echo "setup: nvcc not found; the CUDA backend will be skipped (-Dcuda=auto)"
fi
