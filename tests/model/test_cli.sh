#!/usr/bin/env bash
# The eval and generate commands on bad input: one clear line on stderr, a
# non-zero exit (not a crash), no output files left behind; and a few good
# runs (greedy text, a small sweep with JSON/CSV/PNG).
# usage: test_cli.sh <path to oasiskv> <shared dir>
set -u
cli="$1"
shared="$2"
model="$shared/models/stories260K.bin"
tok="$shared/models/tok512.bin"
text="$shared/data/tinystories_val.txt"
for f in "$model" "$tok" "$text"; do
  [ -f "$f" ] || { echo "SKIP: $f not found"; exit 77; }
done
work="$(mktemp -d /tmp/okv-cli-test-XXXXXX)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/out"
fails=0
n=0

# expect_fail NAME ARGS...: exit code 1..125, exactly one stderr line, nothing in $work/out.
expect_fail() {
  local name="$1"; shift
  n=$((n + 1))
  "$cli" "$@" >"$work/stdout" 2>"$work/stderr"
  local rc=$?
  local lines
  lines=$(wc -l <"$work/stderr")
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 126 ]; then
    echo "FAIL $name: exit $rc"; fails=$((fails + 1))
  elif [ "$lines" -ne 1 ]; then
    echo "FAIL $name: $lines stderr lines:"; cat "$work/stderr"; fails=$((fails + 1))
  elif [ -n "$(ls -A "$work/out")" ]; then
    echo "FAIL $name: left files: $(ls -A "$work/out")"; fails=$((fails + 1))
  else
    echo "ok   $name: $(cat "$work/stderr")"
  fi
  rm -f "$work/out/"* "$work/out/".[!.]* 2>/dev/null
}

# expect_fail_msg NAME PATTERN ARGS...: as expect_fail, and the stderr line matches PATTERN (grep -E).
expect_fail_msg() {
  local name="$1" pattern="$2"; shift 2
  local before=$fails
  expect_fail "$name" "$@"
  if [ "$fails" -eq "$before" ] && ! grep -qE -- "$pattern" "$work/stderr"; then
    echo "FAIL $name: the message does not match '$pattern'"; fails=$((fails + 1))
  fi
}

outs=(--json "$work/out/r.json" --csv "$work/out/r.csv")
base=(--model "$model" --tokenizer "$tok" --text "$text" --bytes 300 --mode oasis)

# Checkpoints.
expect_fail "missing checkpoint" eval "${base[@]}" --model "$work/none.bin" "${outs[@]}"
head -c 5000 "$model" >"$work/trunc.bin"
expect_fail "truncated checkpoint" eval "${base[@]}" --model "$work/trunc.bin" "${outs[@]}"
cp "$model" "$work/hdr.bin"; chmod u+w "$work/hdr.bin"
printf '\xff\xff\xff\x7f' | dd of="$work/hdr.bin" bs=1 seek=0 conv=notrunc 2>/dev/null
expect_fail "header out of range" eval "${base[@]}" --model "$work/hdr.bin" "${outs[@]}"
cp "$model" "$work/big.bin"; chmod u+w "$work/big.bin"; printf 'junk' >>"$work/big.bin"
expect_fail "size not matching header" eval "${base[@]}" --model "$work/big.bin" "${outs[@]}"
expect_fail "generate: corrupted checkpoint" generate --model "$work/hdr.bin" --tokenizer "$tok"
# Tokenizer of another vocabulary size (one token more).
cp "$tok" "$work/tok513.bin"; chmod u+w "$work/tok513.bin"
printf '\x00\x00\x00\x00\x01\x00\x00\x00a' >>"$work/tok513.bin"
expect_fail "tokenizer not matching vocab" eval "${base[@]}" --tokenizer "$work/tok513.bin" "${outs[@]}"
expect_fail "generate: tokenizer not matching vocab" generate --model "$model" --tokenizer "$work/tok513.bin"
# Text.
: >"$work/empty.txt"
expect_fail "empty text" eval "${base[@]}" --text "$work/empty.txt" "${outs[@]}"
printf 'Once upon a \xff\xfe time' >"$work/latin.txt"
expect_fail "non-UTF-8 text" eval "${base[@]}" --text "$work/latin.txt" "${outs[@]}"
expect_fail "missing text" eval "${base[@]}" --text "$work/none.txt" "${outs[@]}"
expect_fail "offset past the end" eval "${base[@]}" --offset 99999999 "${outs[@]}"
printf 'Once upon a time' >"$work/short.txt"
expect_fail "too many windows" eval "${base[@]}" --text "$work/short.txt" --windows 5 --bytes 4 "${outs[@]}"
# Prompt longer than seq_len (512 tokens).
long="$(head -c 6000 "$text")"
expect_fail "prompt longer than seq_len" generate --model "$model" --tokenizer "$tok" --prompt "$long"
expect_fail "non-UTF-8 prompt" generate --model "$model" --tokenizer "$tok" --prompt $'ab\xff'
# Flags.
expect_fail "eval --budget 0" eval "${base[@]}" --budget 0 "${outs[@]}"
expect_fail "generate --budget 0" generate --budget 0
expect_fail "eval --budget above the top-K limit" eval "${base[@]}" --budget 513 "${outs[@]}"
expect_fail "eval --json onto a device file" eval "${base[@]}" --mode dense --json /dev/null
[ -c /dev/null ] || { echo "FAIL: /dev/null was replaced"; exit 1; }
for r in 0 1.5 -0.1 abc nan; do
  expect_fail "eval --fetch-ratio $r" eval "${base[@]}" --fetch-ratio "$r" "${outs[@]}"
done
expect_fail "generate --fetch-ratio 2" generate --fetch-ratio 2
expect_fail_msg "generate --fetch-ratio AUTO (names both forms)" "'AUTO' is neither a number in \(0, 1\] nor auto\[:MAX\]" generate --fetch-ratio AUTO
expect_fail "eval unknown mode" eval "${base[@]}" --mode sparse "${outs[@]}"
expect_fail "generate unknown mode" generate --mode all
expect_fail "eval unknown drafter" eval "${base[@]}" --drafter eagle "${outs[@]}"
expect_fail "generate oracle drafter" generate --drafter oracle
expect_fail "eval unknown device" eval "${base[@]}" --device tpu "${outs[@]}"
expect_fail "generate unknown device" generate --device tpu
expect_fail "eval unknown option" eval --frobnicate
expect_fail_msg "eval missing value" "^oasiskv eval: option --budget needs a value" eval --budget
expect_fail_msg "generate missing value" "^oasiskv generate: option --steps needs a value" generate --steps
expect_fail "generate --temperature -1" generate --temperature -1
expect_fail_msg "generate --temperature 1e-400" "'1e-400' is out of range \(underflows\)" generate --temperature 1e-400
expect_fail_msg "generate --temperature 1e400" "'1e400' is out of range \(overflows\)" generate --temperature 1e400
expect_fail_msg "eval --groups above --budget" "^oasiskv eval: --groups 9 is above --budget 8" eval "${base[@]}" \
  --groups 9 "${outs[@]}"
expect_fail_msg "eval --groups 0" "^oasiskv eval: --groups must be at least 1" eval "${base[@]}" --groups 0 "${outs[@]}"
expect_fail_msg "eval --groups 99999999999" "^oasiskv eval: --groups 99999999999 is above --budget 8" eval "${base[@]}" \
  --groups 99999999999 "${outs[@]}"
expect_fail_msg "eval --groups with flat" "^oasiskv eval: --groups applies to --scoring q8, c4 and two-level" eval \
  "${base[@]}" --scoring flat --groups 4 "${outs[@]}"
expect_fail_msg "eval --fetch-ratio 1e-400" "'1e-400' is out of range \(underflows\)" eval "${base[@]}" \
  --fetch-ratio 1e-400 "${outs[@]}"
expect_fail_msg "generate --temperature abc" "'abc' is not a number" generate --temperature abc
expect_fail_msg "generate --temperature 0.5x" "'0.5x' is not a number" generate --temperature 0.5x
expect_fail_msg "generate --temperature inf" "'inf' is not a finite number" generate --temperature inf
expect_fail_msg "generate --temperature 0x1 (hexadecimal)" "'0x1' is not a number" generate --temperature 0x1
# --steps 0 names the real bound: at least 1, the end at the context (not a [1, 16777216] range that larger
# values then do not get).
expect_fail_msg "generate --steps 0" "--steps must be at least 1 \(generation stops at the end of the context\)" \
  generate --steps 0
# eval --context below the 2 positions every mode needs (one token and the next to score) is refused up front,
# naming --context (it used to say the window encodes to fewer than 2 tokens).
for m in oasis dense all; do
  expect_fail_msg "eval --context 1 --mode $m" "^oasiskv eval: --context 1 is too short.*at least 2" \
    eval "${base[@]}" --mode "$m" --context 1 --bytes 200 "${outs[@]}"
done
expect_fail_msg "eval --context below --prefill-tokens + 2" "^oasiskv eval: --context 5 is too short.*at least 6" \
  eval "${base[@]}" --context 5 --prefill-tokens 4 "${outs[@]}"

# Good runs. Greedy text from BOS is reproducible and starts with the known sentence.
n=$((n + 1))
"$cli" generate --model "$model" --tokenizer "$tok" --steps 64 >"$work/g1" 2>"$work/g1.err"
rc1=$?
"$cli" generate --model "$model" --tokenizer "$tok" --steps 64 >"$work/g2" 2>/dev/null
if [ $rc1 -ne 0 ] || ! cmp -s "$work/g1" "$work/g2" ||
   ! grep -q '^Once upon a time, there was a little girl named Lily\.' "$work/g1" ||
   [ "$(wc -l <"$work/g1.err")" -ne 1 ]; then
  echo "FAIL greedy generate"; cat "$work/g1" "$work/g1.err"; fails=$((fails + 1))
else
  echo "ok   greedy generate: $(head -c 60 "$work/g1")... / $(cat "$work/g1.err")"
fi
# The stats line shows --fetch-ratio auto[:MAX] as eval does (auto:MAX), never the internal -MAX.
for fr in "auto auto:0.05" "auto:1 auto:1" "0.1 0.1"; do
  read -r fr_in fr_out <<<"$fr"
  for m in oasis dense; do
    n=$((n + 1))
    "$cli" generate --model "$model" --tokenizer "$tok" --prompt "Once upon a time" --steps 60 --fetch-ratio "$fr_in" \
      --mode "$m" >/dev/null 2>"$work/fr.err"
    rc=$?
    if [ $rc -ne 0 ] || ! grep -q "fetch ratio $fr_out: hits" "$work/fr.err" ||
       grep -q "fetch ratio -" "$work/fr.err"; then
      echo "FAIL generate --fetch-ratio $fr_in --mode $m (exit $rc):"; cat "$work/fr.err"; fails=$((fails + 1))
    else
      echo "ok   generate --fetch-ratio $fr_in --mode $m: fetch ratio $fr_out"
    fi
  done
done
# --steps beyond the context: generation stops when the context (512 positions, 511 steps after BOS) is full,
# with a one-line note saying so (as llama.cpp stops at a full context); no note within the context.
n=$((n + 1))
"$cli" generate --model "$model" --tokenizer "$tok" --steps 100000 --temperature 0.8 --seed 5 >/dev/null \
  2>"$work/steps.err"
rc=$?
if [ $rc -ne 0 ] || [ "$(wc -l <"$work/steps.err")" -ne 2 ] ||
   ! head -1 "$work/steps.err" |
     grep -q "^oasiskv generate: note: --steps 100000 is more than the context's 512 positions" ||
   ! tail -1 "$work/steps.err" | grep -qE '^generate: [0-9]+ steps'; then
  echo "FAIL generate --steps 100000 (exit $rc):"; cat "$work/steps.err"; fails=$((fails + 1))
else
  echo "ok   generate --steps 100000: $(head -1 "$work/steps.err")"
fi
n=$((n + 1))
"$cli" generate --model "$model" --tokenizer "$tok" --steps 100 --context 64 >/dev/null 2>"$work/steps.err"
rc=$?
"$cli" generate --model "$model" --tokenizer "$tok" --steps 64 --context 64 >/dev/null 2>"$work/steps64.err"
if [ $rc -ne 0 ] || ! grep -q "note: --steps 100 is more than the context's 64 positions" "$work/steps.err" ||
   [ "$(wc -l <"$work/steps64.err")" -ne 1 ] || grep -q note "$work/steps64.err"; then
  echo "FAIL generate --steps past --context (exit $rc):"; cat "$work/steps.err" "$work/steps64.err"
  fails=$((fails + 1))
else
  echo "ok   generate --steps past --context: noted; --steps equal to it: no note"
fi
# --steps below the prompt's tokens: the prompt is fed whole, with a note (it ran more steps than asked silently).
n=$((n + 1))
"$cli" generate --model "$model" --tokenizer "$tok" --prompt "Once upon a time" --steps 1 >/dev/null \
  2>"$work/steps1.err"
rc=$?
if [ $rc -ne 0 ] || ! head -1 "$work/steps1.err" |
     grep -q "^oasiskv generate: note: --steps 1 is fewer than the prompt's [0-9]* tokens"; then
  echo "FAIL generate --steps below the prompt (exit $rc):"; cat "$work/steps1.err"; fails=$((fails + 1))
else
  echo "ok   generate --steps below the prompt: $(head -1 "$work/steps1.err")"
fi
# A prompt is echoed and continued (ngram drafter, sampling with a seed is reproducible).
n=$((n + 1))
"$cli" generate --model "$model" --tokenizer "$tok" --prompt "Lily and Tom went to the park." --steps 40 \
  --drafter ngram --temperature 0.8 --seed 7 >"$work/p1" 2>/dev/null
"$cli" generate --model "$model" --tokenizer "$tok" --prompt "Lily and Tom went to the park." --steps 40 \
  --drafter ngram --temperature 0.8 --seed 7 >"$work/p2" 2>/dev/null
if ! grep -q '^Lily and Tom went to the park\.' "$work/p1" || ! cmp -s "$work/p1" "$work/p2"; then
  echo "FAIL prompt generate"; cat "$work/p1"; fails=$((fails + 1))
else
  echo "ok   prompt generate: $(head -c 60 "$work/p1")..."
fi
# Raw byte tokens: a control byte is not printed, valid UTF-8 is kept byte for byte. The prompt
# "a<BEL>b café ✓" is fed as byte tokens <0x07> and (for ✓) <0xE2><0x9C><0x93>, and echoed.
n=$((n + 1))
"$cli" generate --model "$model" --tokenizer "$tok" --prompt $'a\ab caf\xc3\xa9 \xe2\x9c\x93' --steps 20 \
  >"$work/b1" 2>/dev/null
if [ "$(head -c 12 "$work/b1")" != $'ab caf\xc3\xa9 \xe2\x9c\x93' ]; then
  echo "FAIL byte-token prompt:"; od -c "$work/b1" | head -5; fails=$((fails + 1))
else
  echo "ok   byte-token prompt: $(head -c 40 "$work/b1")..."
fi
# Sampling at a high temperature draws many of the 256 byte tokens (ids 3..258 of the 512): the
# output holds no control byte but whitespace (NUL included) and is valid UTF-8.
n=$((n + 1))
"$cli" generate --model "$model" --tokenizer "$tok" --steps 300 --temperature 20 --seed 3 \
  >"$work/b2" 2>/dev/null
rc=$?
bad=$(LC_ALL=C tr -d '\001-\010\016-\037\177' <"$work/b2" | tr -d '\000' | wc -c)
utf8_ok=1
if command -v iconv >/dev/null; then iconv -f UTF-8 -t UTF-8 "$work/b2" >/dev/null 2>&1 || utf8_ok=0; fi
if [ $rc -ne 0 ] || [ "$bad" -ne "$(wc -c <"$work/b2")" ] || [ "$utf8_ok" -ne 1 ]; then
  echo "FAIL hot sampling prints control bytes or invalid UTF-8 (exit $rc):"; od -c "$work/b2" | head -20
  fails=$((fails + 1))
else
  echo "ok   hot sampling: $(wc -c <"$work/b2") bytes, no control bytes, valid UTF-8"
fi
# A small sweep writes JSON (16 objects: dense + 3 modes x 5 budgets), CSV (17 lines) and the PNG.
n=$((n + 1))
if command -v gnuplot >/dev/null; then
  "$cli" eval --model "$model" --tokenizer "$tok" --text "$text" --bytes 250 --sweep \
    --json "$work/out/s.json" --csv "$work/out/s.csv" --plot "$work/out/s.png" >"$work/sweep.txt" 2>/dev/null
  rc=$?
  if [ $rc -ne 0 ] || [ "$(grep -c '"mode"' "$work/out/s.json")" -ne 16 ] ||
     [ "$(wc -l <"$work/out/s.csv")" -ne 17 ] || [ ! -s "$work/out/s.png" ] ||
     [ "$(ls "$work/out" | wc -l)" -ne 3 ] || [ "$(grep -c '^oasis ' "$work/sweep.txt")" -ne 5 ]; then
    echo "FAIL sweep (exit $rc)"; ls -la "$work/out"; cat "$work/sweep.txt"; fails=$((fails + 1))
  else
    echo "ok   sweep: $(ls "$work/out" | tr '\n' ' ')"
  fi
else
  expect_fail "sweep without gnuplot" eval --model "$model" --tokenizer "$tok" --text "$text" --sweep \
    --json "$work/out/s.json" --csv "$work/out/s.csv" --plot "$work/out/s.png"
fi
# --json - prints JSON instead of the table.
n=$((n + 1))
"$cli" eval --model "$model" --tokenizer "$tok" --text "$text" --bytes 300 --mode proxy --json - >"$work/j" 2>/dev/null
if [ "$(head -c 1 "$work/j")" != "[" ] || [ "$(grep -c '"mode"' "$work/j")" -ne 2 ]; then
  echo "FAIL --json -"; cat "$work/j"; fails=$((fails + 1))
else
  echo "ok   --json -"
fi
# --scoring and --fetch-ratio auto[:MAX] show in the JSON (scoring, fetch_ratio_auto), the CSV and the table
# (an auto run's ratio as auto:MAX, never like a fixed one).
n=$((n + 1))
sc=(eval --model "$model" --tokenizer "$tok" --text "$text" --bytes 300 --mode proxy --scoring flat --fetch-ratio auto:0.5)
"$cli" "${sc[@]}" --json - >"$work/sj" 2>/dev/null
"$cli" "${sc[@]}" --csv - >"$work/sc" 2>/dev/null
"$cli" "${sc[@]}" >"$work/st" 2>/dev/null
"$cli" eval --model "$model" --tokenizer "$tok" --text "$text" --bytes 300 --mode proxy --json - >"$work/sd" 2>/dev/null
if [ "$(grep -c '"scoring":"flat"' "$work/sj")" -ne 2 ] || [ "$(grep -c '"fetch_ratio_auto":true' "$work/sj")" -ne 2 ] ||
   [ "$(grep -c '"scoring":"c4"' "$work/sd")" -ne 2 ] || ! head -1 "$work/sc" | grep -q ',fetch_ratio_auto,scoring,' ||
   [ "$(grep -c '^proxy,none,8,0.5,true,flat,' "$work/sc")" -ne 1 ] ||
   ! grep -qE '^proxy +none +8 +auto:0\.5 +flat ' "$work/st" || grep -qE '^proxy +none +8 +0\.5' "$work/st"; then
  echo "FAIL --scoring / --fetch-ratio auto in the outputs"; cat "$work/sj" "$work/sc" "$work/st"; fails=$((fails + 1))
else
  echo "ok   --scoring / --fetch-ratio auto in JSON, CSV and table"
fi

# --groups: the JSON gives the margin in effect; the default at K = 8 is min(K, 8) = 8, --groups 3 passes
# through (stories260K's 512 tokens are 32 blocks, above K + either), and dense reads 0 (every block exact).
n=$((n + 1))
"$cli" eval --model "$model" --tokenizer "$tok" --text "$text" --bytes 300 --mode oasis --json - >"$work/g0" 2>/dev/null
"$cli" eval --model "$model" --tokenizer "$tok" --text "$text" --bytes 300 --mode oasis --groups 3 --json - \
  >"$work/g3" 2>/dev/null
tr -d ' \n' <"$work/g0" >"$work/g0f" && tr -d ' \n' <"$work/g3" >"$work/g3f" # one line: the JSON is indented
if ! grep -q '"mode":"dense",[^}]*"scoring_groups":0,' "$work/g0f" ||
   ! grep -q '"mode":"oasis",[^}]*"scoring_groups":8,' "$work/g0f" ||
   ! grep -q '"mode":"oasis",[^}]*"scoring_groups":3,' "$work/g3f"; then
  echo "FAIL --groups in the JSON"; cat "$work/g0" "$work/g3"; fails=$((fails + 1))
else
  echo "ok   --groups in the JSON"
fi

# Two-level scoring told to keep fewer blocks than K (1 group of 16 at K = 20): a note, and the run goes ahead.
n=$((n + 1))
if "$cli" eval --model "$model" --tokenizer "$tok" --text "$text" --bytes 300 --mode oasis --budget 20 --groups 1 \
     --scoring two-level >/dev/null 2>"$work/tl" &&
   grep -q 'note: mode oasis, K 20: two-level scoring kept 1 groups of 16 blocks per KV head, 16 blocks' "$work/tl"; then
  echo "ok   two-level --groups below K / 16: a note"
else
  echo "FAIL two-level --groups below K / 16"; cat "$work/tl"; fails=$((fails + 1))
fi

# c4 whose K + margin covers a KV head's whole context (K 31 of 32 blocks) scores every block exactly: a note
# that says so (scoring_groups reads 0), and none at K 8, where the margin is 8 of 24 blocks left.
n=$((n + 1))
if "$cli" eval --model "$model" --tokenizer "$tok" --text "$text" --bytes 300 --mode oasis --budget 31 \
     >/dev/null 2>"$work/fb" &&
   grep -q 'note: mode oasis, K 31: --scoring c4 scored every block exactly, as flat does' "$work/fb" &&
   "$cli" eval --model "$model" --tokenizer "$tok" --text "$text" --bytes 300 --mode oasis --budget 8 \
     >/dev/null 2>"$work/fb8" && ! grep -q 'scored every block exactly' "$work/fb8"; then
  echo "ok   c4 falling back to exact scoring: a note"
else
  echo "FAIL c4 falling back to exact scoring"; cat "$work/fb" "$work/fb8"; fails=$((fails + 1))
fi

# tokenize: the reference encodings of ../shared/gguf (line k of <vocab>.out is string k of <vocab>.inp).
spm="$shared/gguf/ggml-vocab-llama-spm.gguf"
gpt2="$shared/gguf/ggml-vocab-gpt-2.gguf"
if [ -f "$spm" ] && [ -f "$gpt2" ]; then
  rm -f "$work/out/"*
  # expect_tokens NAME EXPECTED TEXT ARGS...: stdout of `tokenize ARGS < TEXT` equals EXPECTED.
  expect_tokens() {
    local name="$1" want="$2" input="$3"; shift 3
    n=$((n + 1))
    local got
    got=$(printf '%s' "$input" | "$cli" tokenize "$@" 2>"$work/stderr")
    local rc=$?
    if [ $rc -ne 0 ] || [ "$got" != "$want" ]; then
      echo "FAIL $name (exit $rc): got '$got', expected '$want'"; cat "$work/stderr"; fails=$((fails + 1))
    else
      echo "ok   $name: $got"
    fi
  }
  ref_line() { sed -n "${2}p" "$1.out" | sed 's/^ *//; s/ *$//'; }
  expect_tokens "tokenize spm 17" "$(ref_line "$spm" 17)" 'Hello, world!' --model "$spm" --no-bos
  expect_tokens "tokenize spm 31 (newline)" "$(ref_line "$spm" 31)" $'\n =' --model "$spm" --no-bos
  expect_tokens "tokenize spm BOS" "1 $(ref_line "$spm" 17)" 'Hello, world!' --model "$spm"
  expect_tokens "tokenize spm pieces" $'<s> \xe2\x96\x81Hello , \xe2\x96\x81world !' 'Hello, world!' --model "$spm" \
    --pieces
  expect_tokens "tokenize gpt-2 33" "$(ref_line "$gpt2" 33)" \
    $'Hello, y\'all! How are you \xf0\x9f\x98\x81 ?\xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8apple\xe5\xb7\xa5\xe4\xbd\x9c1314151\xe5\xa4\xa9\xef\xbd\x9e' \
    --model "$gpt2"
  expect_tokens "tokenize empty" "" '' --model "$gpt2"
  expect_tokens "tokenize llama2.c" "1 346 306 414 263 304 341" 'Hello world' --model "$model" --tokenizer "$tok"
  expect_tokens "tokenize GGUF --tokenizer" "15496 995" 'Hello world' --model "$gpt2" --tokenizer "$gpt2"
  printf 'ab\xff' >"$work/latin.txt"
  n=$((n + 1))
  if "$cli" tokenize --model "$spm" <"$work/latin.txt" >/dev/null 2>"$work/stderr" || [ "$(wc -l <"$work/stderr")" -ne 1 ]; then
    echo "FAIL tokenize non-UTF-8 input"; fails=$((fails + 1))
  else
    echo "ok   tokenize non-UTF-8 input: $(cat "$work/stderr")"
  fi
  expect_fail "tokenize unknown option" tokenize --model "$spm" --ids
  expect_fail_msg "tokenize missing model" "none.gguf" tokenize --model "$work/none.gguf"
  expect_fail_msg "tokenize llama2.c tokenizer of another size" "tokenizer" tokenize --model "$spm" --tokenizer "$tok"
  expect_fail_msg "tokenize GGUF tokenizer of another size" "50257" tokenize --model "$spm" --tokenizer "$gpt2"
fi

echo "$((n - fails))/$n passed"
[ "$fails" -eq 0 ]
