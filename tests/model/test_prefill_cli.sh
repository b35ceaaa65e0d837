#!/usr/bin/env bash
# oasiskv eval --prefill-tokens (prefill/decode disaggregation through a KV
# source, docs/api.md "Remote sequences") on stories260K: bad values are one
# stderr line and a non-zero exit; a run reports the admission exactly
# (summaries + K + 1 blocks per KV head: 5 layers x 4 KV heads x (24 x 64 +
# 9 x 1024) = 215040 bytes at P = 384, K = 8, against 491520 for the full
# KV), reads at most the rest, and is reproducible.
# usage: test_prefill_cli.sh <path to oasiskv> <shared dir>
set -u
cli="$1"
shared="$2"
model="$shared/models/stories260K.bin"
tok="$shared/models/tok512.bin"
text="$shared/data/tinystories_val.txt"
for f in "$model" "$tok" "$text"; do
  [ -f "$f" ] || { echo "SKIP: $f not found"; exit 77; }
done
work="$(mktemp -d /tmp/okv-prefill-cli-XXXXXX)"
trap 'rm -rf "$work"' EXIT
fails=0
base=(eval --model "$model" --tokenizer "$tok" --text "$text")

# expect_fail NAME PATTERN ARGS...: exit 1..125, exactly one stderr line matching PATTERN, nothing on stdout.
expect_fail() {
  local name="$1" pattern="$2"; shift 2
  "$cli" "$@" >"$work/stdout" 2>"$work/stderr"
  local rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 126 ] || [ "$(wc -l <"$work/stderr")" -ne 1 ] ||
     ! grep -qE -- "$pattern" "$work/stderr" || [ -s "$work/stdout" ]; then
    echo "FAIL $name (exit $rc):"; cat "$work/stderr"; fails=$((fails + 1))
  else
    echo "ok   $name: $(cat "$work/stderr")"
  fi
}

expect_fail "--prefill-tokens 0" "--prefill-tokens" "${base[@]}" --prefill-tokens 0
expect_fail "--prefill-tokens abc" "--prefill-tokens" "${base[@]}" --prefill-tokens abc
expect_fail "window shorter than the prefill" "needs at least 602" "${base[@]}" --prefill-tokens 600
expect_fail "window of few bytes" "needs at least 386" "${base[@]}" --prefill-tokens 384 --bytes 300

# json_num FILE MODE KEY: the number KEY of the result of MODE (pretty JSON, one key per line).
json_num() {
  awk -v mode="\"$2\"" -v key="\"$3\"" -F: '
    $1 ~ /"mode"/ { gsub(/[ ,]/, "", $2); cur = $2 }
    cur == mode { k = $1; gsub(/ /, "", k); if (k == key) { v = $2; gsub(/[ ,]/, "", v); print v; exit } }' "$1"
}

"$cli" "${base[@]}" --prefill-tokens 384 --budget 8 --json - >"$work/a.json" 2>"$work/a.err"
rc=$?
"$cli" "${base[@]}" --prefill-tokens 384 --budget 8 --json - >"$work/b.json" 2>/dev/null
sed -e '/tokens_per_second\|stall_seconds\|remote_gbps/d' "$work/a.json" >"$work/a.cmp"
sed -e '/tokens_per_second\|stall_seconds\|remote_gbps/d' "$work/b.json" >"$work/b.cmp"
if [ $rc -ne 0 ] || ! cmp -s "$work/a.cmp" "$work/b.cmp"; then
  echo "FAIL two runs differ or failed (exit $rc)"; cat "$work/a.err"; fails=$((fails + 1))
else
  echo "ok   reproducible"
fi
for mode in dense oasis proxy ondemand; do
  pt=$(json_num "$work/a.json" $mode prefill_tokens)
  te=$(json_num "$work/a.json" $mode tokens_evaluated)
  adm=$(json_num "$work/a.json" $mode admitted_bytes)
  full=$(json_num "$work/a.json" $mode full_kv_bytes)
  ratio=$(json_num "$work/a.json" $mode admission_ratio)
  rb=$(json_num "$work/a.json" $mode remote_bytes)
  want_adm=215040
  [ $mode = dense ] && want_adm=$((491520 + 5 * 4 * 24 * 64)) # dense: every block and the summaries
  ok=1
  [ "$pt" = 384 ] && [ "$te" = 127 ] && [ "$adm" = "$want_adm" ] && [ "$full" = 491520 ] || ok=0
  awk -v r="$ratio" -v f="$full" -v a="$adm" 'BEGIN { exit !((r - f / a) ^ 2 < 1e-12) }' || ok=0
  if [ $mode = dense ]; then
    [ "$rb" = 0 ] || ok=0
  else # at least one block read, at most every block not admitted, whole blocks
    [ "$rb" -gt 0 ] && [ "$rb" -le $((491520 - 5 * 4 * 9 * 1024)) ] && [ $((rb % 1024)) -eq 0 ] || ok=0
  fi
  for key in remote_stall_seconds remote_gbps; do grep -q "\"$key\"" "$work/a.json" || ok=0; done
  if [ $ok -ne 1 ]; then
    echo "FAIL $mode: prefill_tokens $pt tokens $te admitted $adm full $full ratio $ratio remote $rb"
    fails=$((fails + 1))
  else
    echo "ok   $mode: admitted $adm of $full bytes (ratio $ratio), read $rb during decode"
  fi
done
# The table says it too.
"$cli" "${base[@]}" --prefill-tokens 384 --budget 8 --mode proxy >"$work/t.txt" 2>/dev/null
if ! grep -q "^prefill 384 tokens per window" "$work/t.txt" ||
   ! grep -qE "^proxy +8 +215040 +491520 +2\.286" "$work/t.txt"; then
  echo "FAIL table"; cat "$work/t.txt"; fails=$((fails + 1))
else
  echo "ok   table"
fi
[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
