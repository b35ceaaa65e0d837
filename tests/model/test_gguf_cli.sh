#!/usr/bin/env bash
# The CLI on GGUF models: `oasiskv info --model`, eval/generate with
# --model FILE.gguf (tokenizer from the file), --context, and bad GGUF files
# (one clear stderr line, a non-zero exit).
# usage: test_gguf_cli.sh <path to oasiskv> <shared dir> <path to gguf_fixture>
set -u
cli="$1"
shared="$2"
fixture="$3"
gguf="$shared/gguf/stories260K.gguf"
bin="$shared/models/stories260K.bin"
tok="$shared/models/tok512.bin"
vocab_gpt2="$shared/gguf/ggml-vocab-gpt-2.gguf"
text="$shared/data/tinystories_val.txt"
for f in "$gguf" "$bin" "$tok" "$vocab_gpt2" "$text"; do
  [ -f "$f" ] || { echo "SKIP: $f not found"; exit 77; }
done
work="$(mktemp -d /tmp/okv-gguf-cli-XXXXXX)"
trap 'rm -rf "$work"' EXIT
fails=0

fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# expect_fail NAME PATTERN ARGS...: exit 1..125, exactly one stderr line matching PATTERN.
expect_fail() {
  local name="$1" pattern="$2"; shift 2
  "$cli" "$@" >"$work/stdout" 2>"$work/stderr"
  local rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 126 ]; then
    fail "$name: exit $rc"
  elif [ "$(wc -l <"$work/stderr")" -ne 1 ]; then
    fail "$name: stderr is not one line:"; cat "$work/stderr"
  elif ! grep -qE -- "$pattern" "$work/stderr"; then
    fail "$name: '$(cat "$work/stderr")' does not match '$pattern'"
  else
    echo "ok   $name: $(cat "$work/stderr")"
  fi
}

# info --model: the shape, context, RoPE, types and tokenizer.
"$cli" info --model "$gguf" >"$work/info" 2>&1 || fail "info --model: exit $?"
for want in "GGUF v3" "architecture llama" \
  "shape: layers 5, query heads 8, KV heads 4, head_dim 8, dim 64, ffn 172, vocab 512" \
  "context length 128" "rope: theta 10000, scaling none" "tensor types: F32 48" "tokenizer: llama, 512 tokens" \
  "loads: yes"; do
  grep -qF -- "$want" "$work/info" || { fail "info --model: no '$want' in:"; cat "$work/info"; }
done
"$cli" info --model "$gguf" --json >"$work/info.json" 2>&1 || fail "info --model --json: exit $?"
grep -q '"kv_heads":4' "$work/info.json" && grep -q '"context_length":128' "$work/info.json" &&
  grep -q '"F32":48' "$work/info.json" || { fail "info --json:"; cat "$work/info.json"; }
"$cli" info --model "$vocab_gpt2" >"$work/info2" 2>&1 || fail "info on a vocabulary-only file: exit $?"
grep -q "tokenizer: gpt2, pre-tokenizer gpt-2, 50257 tokens" "$work/info2" &&
  grep -q "loads: no: .*architecture 'gpt2' is not supported" "$work/info2" || { fail "info gpt2:"; cat "$work/info2"; }
"$cli" info --model "$bin" >"$work/info3" 2>&1 || fail "info on a llama2.c checkpoint: exit $?"
grep -q "llama2.c checkpoint" "$work/info3" && grep -q "context length 512" "$work/info3" ||
  { fail "info .bin:"; cat "$work/info3"; }
expect_fail "info on a missing model" "No such file" info --model "$work/none.gguf"

# eval: the GGUF model (tokenizer from the file) at --context 512 gives the .bin's dense NLL (to 1e-6).
nll() { sed -n 's/.*"mean_nll":\([0-9.]*\).*/\1/p' | head -n 1; }
"$cli" eval --model "$gguf" --context 512 --mode dense --bytes 1000 --json - 2>"$work/err" | tr -d ' \n' >"$work/g.json" ||
  { fail "eval gguf: exit"; cat "$work/err"; }
"$cli" eval --model "$bin" --tokenizer "$tok" --mode dense --bytes 1000 --json - 2>"$work/err" | tr -d ' \n' >"$work/b.json" ||
  { fail "eval bin: exit"; cat "$work/err"; }
g=$(nll <"$work/g.json")
b=$(nll <"$work/b.json")
if [ -z "$g" ] || [ -z "$b" ] || ! awk -v g="$g" -v b="$b" 'BEGIN { d = g - b; if (d < 0) d = -d; exit !(d < 1e-6) }'; then
  fail "dense NLL: gguf '$g' vs bin '$b'"
else
  echo "ok   dense NLL: gguf $g, bin $b"
fi
# The default context is the file's (128): the windows are cut there.
"$cli" eval --model "$gguf" --mode dense --bytes 1000 --json - 2>/dev/null | tr -d ' \n' | grep -q '"tokens_evaluated":127' ||
  fail "eval gguf without --context: not 127 tokens"
# --tokenizer overrides the file's.
"$cli" eval --model "$gguf" --tokenizer "$tok" --context 512 --mode dense --bytes 1000 --json - 2>/dev/null |
  tr -d ' \n' | grep -q "\"mean_nll\":$g" || fail "eval gguf --tokenizer tok512.bin: another NLL than '$g'"

# generate: greedy text from the GGUF model equals the .bin's.
"$cli" generate --model "$gguf" --mode dense --steps 60 2>/dev/null >"$work/g.txt" || fail "generate gguf: exit"
"$cli" generate --model "$bin" --tokenizer "$tok" --mode dense --steps 60 2>/dev/null >"$work/b.txt" ||
  fail "generate bin: exit"
cmp -s "$work/g.txt" "$work/b.txt" && grep -q "^Once upon a time" "$work/g.txt" ||
  { fail "generate: gguf and bin texts differ:"; cat "$work/g.txt" "$work/b.txt"; }

# Regressions of the GGUF review (2026-11-30), on stories260K converted by gguf_fixture.
"$fixture" "$bin" "$tok" "$work/plain.gguf" && "$fixture" "$bin" "$tok" "$work/eos.gguf" --add-eos &&
  "$fixture" "$bin" "$tok" "$work/nobos.gguf" --no-bos || fail "gguf_fixture: exit $?"
eval_json() { "$cli" eval "$@" --mode dense --json - 2>"$work/err" | tr -d ' \n'; }
# add_eos_token: a window of running text (300 bytes: shorter than the context) gets no EOS, so the NLL and
# the token count are the plain file's.
p=$(eval_json --model "$work/plain.gguf" --context 512 --bytes 300)
e=$(eval_json --model "$work/eos.gguf" --context 512 --bytes 300)
ntok() { sed -n 's/.*"tokens_evaluated":\([0-9]*\).*/\1/p' | head -n 1; }
[ -n "$(nll <<<"$p")" ] && [ "$(nll <<<"$p")" = "$(nll <<<"$e")" ] && [ "$(ntok <<<"$p")" = "$(ntok <<<"$e")" ] &&
  [ "$(ntok <<<"$p")" -lt 500 ] ||
  fail "eval with add_eos_token: NLL '$(nll <<<"$e")' vs '$(nll <<<"$p")', tokens $(ntok <<<"$e") vs $(ntok <<<"$p")"
# add_eos_token: generate does not stop at once; the text is the plain file's.
"$cli" generate --model "$work/plain.gguf" --mode dense --steps 40 2>/dev/null >"$work/p.txt"
"$cli" generate --model "$work/eos.gguf" --mode dense --steps 40 2>/dev/null >"$work/e.txt"
cmp -s "$work/p.txt" "$work/e.txt" && [ "$(wc -c <"$work/e.txt")" -gt 60 ] ||
  { fail "generate with add_eos_token:"; cat "$work/e.txt"; }
# Without add_bos_token the prompt's first word is kept in the output.
"$cli" generate --model "$work/nobos.gguf" --mode dense --steps 40 --prompt "Lily went" 2>/dev/null >"$work/n.txt"
grep -q "^Lily went" "$work/n.txt" || { fail "generate without BOS: first word lost:"; cat "$work/n.txt"; }
# --tokenizer takes a GGUF file: the .bin model with the GGUF's vocabulary gives the .bin's NLL.
t=$(eval_json --model "$bin" --tokenizer "$work/plain.gguf" --bytes 1000)
[ "$(nll <<<"$t")" = "$b" ] || fail "eval --tokenizer FILE.gguf: NLL '$(nll <<<"$t")' vs '$b'"
# Contexts above 8,192 tokens (the dense budget is capped at the top-K limit).
eval_json --model "$gguf" --context 9000 --bytes 1000 | grep -q '"mean_nll"' || { fail "eval --context 9000:"; cat "$work/err"; }

# Bad GGUF files and options.
expect_fail "eval on a vocabulary-only gpt2 file" "architecture 'gpt2' is not supported" \
  eval --model "$vocab_gpt2" --bytes 100 --mode dense
head -c 3000 "$gguf" >"$work/trunc.gguf"
expect_fail "eval on a truncated gguf" "truncated|past the end|cannot fit|more than the" eval --model "$work/trunc.gguf" --bytes 100 --mode dense
head -c 100 "$gguf" >"$work/trunc2.gguf"
expect_fail "generate on a truncated gguf" "truncated|past the end|cannot fit|more than the" generate --model "$work/trunc2.gguf"
expect_fail "eval --context 0" "--context must be in" eval --model "$gguf" --context 0
expect_fail "eval --context past seq_len of a .bin" "longer than its seq_len 512" \
  eval --model "$bin" --tokenizer "$tok" --context 513 --bytes 100 --mode dense
expect_fail "generate --context too large" "--context must be in" generate --model "$gguf" --context 2000000
expect_fail "eval gguf with a tokenizer of another vocabulary" "tokenizer|vocab" \
  eval --model "$gguf" --tokenizer "$shared/models/tok32000.bin" --bytes 100 --mode dense

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all GGUF CLI checks passed"
