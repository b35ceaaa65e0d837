#!/usr/bin/env bash
# Checks that liboasiskv.so exports exactly the functions declared with OKV_API
# in include/oasiskv/ (built with -fvisibility=hidden): nothing internal leaks,
# nothing public is missing. Usage: scripts/check-exports.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
lib="${1:-build}/liboasiskv.so"
[ -f "$lib" ] || { echo "check-exports: $lib not found" >&2; exit 2; }
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort -u)
declared=$(grep -h 'OKV_API' include/oasiskv/*.h | grep -o 'okv_[a-z0-9_]*(' | tr -d '(' | sort -u)
leaked=$(comm -23 <(echo "$exported") <(echo "$declared"))
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
n=$(echo "$exported" | grep -c . || true)
if [ -n "$leaked" ]; then echo "check-exports: exported but not declared OKV_API in include/oasiskv/:"; echo "$leaked"; fi
if [ -n "$missing" ]; then echo "check-exports: declared OKV_API but not exported:"; echo "$missing"; fi
[ -z "$leaked$missing" ] || exit 1
echo "check-exports: $n symbols exported, all declared in include/oasiskv/"
