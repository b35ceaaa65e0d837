#!/usr/bin/env bash
# One style, checked: clang-format (.clang-format: 120 columns) over every C,
# C++ and CUDA source of the project. `scripts/check-style.sh` reports files that
# differ and exits 1; `scripts/check-style.sh --fix` rewrites them.
# tests/core/api_example.c is excluded: docs/api.md quotes it verbatim.
set -euo pipefail
cd "$(dirname "$0")/.."
cf="${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}"
[ -n "$cf" ] || { echo "check-style: clang-format not found (apt-get install clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.c' '*.h' '*.cu' '*.cc' \
  | grep -v -e '^tests/core/api_example.c$' -e '^build' | sort)
if [ "${1:-}" = "--fix" ]; then
  "$cf" -i "${files[@]}"
  echo "check-style: formatted ${#files[@]} files"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$cf" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
long=$(awk 'length > 120 {print FILENAME ":" FNR}' "${files[@]}" | head -20)
if [ "${#bad[@]}" -gt 0 ] || [ -n "$long" ]; then
  [ "${#bad[@]}" -gt 0 ] && printf 'check-style: not clang-format clean: %s\n' "${bad[@]}"
  [ -n "$long" ] && printf 'check-style: over 120 columns: %s\n' $long
  echo "check-style: run scripts/check-style.sh --fix"
  exit 1
fi
echo "check-style: ${#files[@]} files clean ($("$cf" --version | head -1))"
