#!/usr/bin/env bash
# oasiskv serve + eval --remote / --disaggregated (docs/remote.md "oasiskv serve"): prefill/decode
# disaggregation over UCX between two processes on loopback.
#  - bad input: one stderr line, non-zero exit (non-loopback without a token, bad ADDR:PORT, nothing
#    listening: UNAVAILABLE naming the peer, wrong token);
#  - remote mode equals local --prefill-tokens mode bit for bit (NLL, top-1, KL, recall, bytes moved,
#    admitted/full/remote bytes) in every mode (dense, oasis, proxy, ondemand), over UCX_TLS=tcp and over
#    shared memory (shm,tcp), with --disaggregated (its own server) and --remote with a token file;
#  - the Done-when commands: stories260K at P = 384 and stories15M at P = 192 (mode oasis, to bound time);
#  - admitted bytes are exactly summaries + (K + 1) blocks per KV head (215040 at P = 384, K = 8) and
#    remote_bytes > 0 in the sparse modes (blocks did cross the network);
#  - generate --disaggregated prints byte for byte the text of generate --prefill (local) in every mode
#    (dense, oasis+self, oasis+ngram, proxy, ondemand) over tcp and shm,tcp, with the same admission and
#    remote bytes (exact: summaries + (K + 1) blocks per KV head, every block in dense); dense with --prefill
#    prints the text of plain dense generate; generate --remote with a token file, a wrong token refused;
#  - the server killed with kill -9 mid-eval: eval fails with one UNAVAILABLE line naming 127.0.0.1:PORT
#    within the timeout, no crash; the server exits 0 on SIGTERM; no server is left running.
# usage: test_serve_cli.sh <path to oasiskv> <shared dir> [small|15m]
#   small (default): everything on stories260K; 15m: the stories15M checks (kill -9 mid-decode, the
#   Done-when command), registered in suite 'slow' (the sanitizer runs skip it).
set -u
cli="$1"
shared="$2"
part="${3:-small}"
m260="$shared/models/stories260K.bin"
t512="$shared/models/tok512.bin"
m15="$shared/models/stories15M.bin"
t32k="$shared/models/tok32000.bin"
text="$shared/data/tinystories_val.txt"
for f in "$m260" "$t512" "$text"; do
  [ -f "$f" ] || { echo "SKIP: $f not found"; exit 77; }
done
export UCX_LOG_LEVEL=error UCX_WARN_UNUSED_ENV_VARS=n
work="$(mktemp -d /tmp/okv-serve-cli-XXXXXX)"
srv_pid=
cleanup() {
  [ -n "$srv_pid" ] && kill -9 "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fails=0
if [ "$part" = 15m ] && { [ ! -f "$m15" ] || [ ! -f "$t32k" ]; }; then
  echo "SKIP: $m15 or $t32k not found"; exit 77
fi
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
b260=(eval --model "$m260" --tokenizer "$t512" --text "$text")

# expect_fail NAME PATTERN ARGS...: exit 1..125, exactly one stderr line matching PATTERN.
expect_fail() {
  local name="$1" pattern="$2"; shift 2
  timeout 60 "$cli" "$@" >"$work/stdout" 2>"$work/stderr"
  local rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ] || [ "$(wc -l <"$work/stderr")" -ne 1 ] ||
     ! grep -qE -- "$pattern" "$work/stderr"; then
    fail "$name (exit $rc):"; cat "$work/stderr"
  else
    echo "ok   $name: $(cat "$work/stderr")"
  fi
}
# json_num FILE MODE KEY: the number KEY of the result of MODE (pretty JSON, one key per line).
json_num() {
  awk -v mode="\"$2\"" -v key="\"$3\"" -F: '
    $1 ~ /"mode"/ { gsub(/[ ,]/, "", $2); cur = $2 }
    cur == mode { k = $1; gsub(/ /, "", k); if (k == key) { v = $2; gsub(/[ ,]/, "", v); print v; exit } }' "$1"
}
# strip FILE: the results without what is timed (seconds, rates).
strip() { sed -e '/tokens_per_second\|stall_seconds\|remote_gbps/d' "$1"; }
# same NAME LOCAL REMOTE MODES...: bit-identical results; admission and remote bytes reported.
same() {
  local name="$1" a="$2" b="$3"; shift 3
  if ! cmp -s <(strip "$a") <(strip "$b"); then
    fail "$name: remote results differ from local:"; diff <(strip "$a") <(strip "$b") | head -20; return
  fi
  local m
  for m in "$@"; do
    local adm full ratio
    adm=$(json_num "$b" "$m" admitted_bytes); full=$(json_num "$b" "$m" full_kv_bytes)
    ratio=$(json_num "$b" "$m" admission_ratio)
    if [ -z "$adm" ] || [ "$adm" -le 0 ] || [ -z "$full" ] || [ -z "$ratio" ]; then
      fail "$name: mode $m reports no admission ($adm, $full, $ratio)"; return
    fi
  done
  echo "ok   $name: same results as local ($(for m in "$@"; do printf '%s nll %s admitted %s ratio %s remote %s; ' \
    "$m" "$(json_num "$b" "$m" mean_nll)" "$(json_num "$b" "$m" admitted_bytes)" \
    "$(json_num "$b" "$m" admission_ratio)" "$(json_num "$b" "$m" remote_bytes)"; done))"
}

start_server() { # start_server MODEL TOKENIZER [more serve args]: sets srv_pid and port
  "$cli" serve --model "$1" --tokenizer "$2" --listen 127.0.0.1:0 "${@:3}" >"$work/srv.out" 2>"$work/srv.err" &
  srv_pid=$!
  port=
  for _ in $(seq 1 300); do
    port=$(sed -n 's/^oasiskv serve: listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$work/srv.out")
    [ -n "$port" ] && return 0
    kill -0 "$srv_pid" 2>/dev/null || break
    sleep 0.1
  done
  fail "the server did not report its port"; cat "$work/srv.err"; return 1
}

if [ "$part" = small ]; then
expect_fail "serve on a non-loopback address without a token" "without --token-file" \
  serve --model "$m260" --tokenizer "$t512" --listen 10.255.255.1:0
expect_fail "serve --listen without a port" "ADDR:PORT" serve --model "$m260" --listen 127.0.0.1
mkdir -p "$work/tokdir"
expect_fail "a token file that is a directory" "tokdir': Is a directory" serve --model "$m260" --token-file "$work/tokdir"
expect_fail "serve --listen with a host name" "numeric IPv4" serve --model "$m260" --listen localhost:7000
expect_fail "--remote without --prefill-tokens" "need --prefill-tokens" "${b260[@]}" --remote 127.0.0.1:7000
expect_fail "--remote and --disaggregated" "exclude" "${b260[@]}" --prefill-tokens 384 --remote 127.0.0.1:7 \
  --disaggregated
expect_fail "nothing listening" "127\.0\.0\.1:1 unavailable" "${b260[@]}" --prefill-tokens 384 --remote 127.0.0.1:1


# Local reference (no UCX): stories260K, P = 384, every mode.
timeout 120 "$cli" "${b260[@]}" --prefill-tokens 384 --json - >"$work/local.json" 2>"$work/local.err" ||
  { fail "local run"; cat "$work/local.err"; }
for tls in tcp shm,tcp; do
  UCX_TLS=$tls timeout 180 "$cli" "${b260[@]}" --prefill-tokens 384 --disaggregated --json - \
    >"$work/dis.json" 2>"$work/dis.err"
  rc=$?
  if [ $rc -ne 0 ]; then fail "--disaggregated over UCX_TLS=$tls (exit $rc)"; cat "$work/dis.err"; continue; fi
  same "stories260K P=384 --disaggregated UCX_TLS=$tls" "$work/local.json" "$work/dis.json" dense oasis proxy ondemand
done
adm=$(json_num "$work/dis.json" oasis admitted_bytes)
[ "$adm" = 215040 ] && echo "ok   admitted bytes exact: $adm" || fail "oasis admitted $adm bytes, expected 215040"
for m in oasis proxy ondemand; do
  rb=$(json_num "$work/dis.json" $m remote_bytes)
  [ -n "$rb" ] && [ "$rb" -gt 0 ] || fail "mode $m read no blocks over the network (remote_bytes $rb)"
done

# generate --prefill / --disaggregated: stories260K, a 700-byte prompt (P = 354 prefilled tokens, 23 blocks),
# 157 decode steps.
g260=(generate --model "$m260" --tokenizer "$t512" --prompt "$(head -c 700 "$text")" --steps 512)
expect_fail "generate --token-file without --remote" "goes with --remote" "${g260[@]}" --token-file "$work/none"
expect_fail "generate --remote and --disaggregated" "exclude" "${g260[@]}" --remote 127.0.0.1:7 --disaggregated
expect_fail "generate --prefill of a 1-token prompt" "the prompt needs 2\.\.511 tokens .*it has 1" \
  generate --model "$m260" --tokenizer "$t512" --prompt "" --prefill
expect_fail "generate, nothing listening" "127\.0\.0\.1:1 unavailable" "${g260[@]}" --remote 127.0.0.1:1
# adm_line FILE: generate's admission line without the timed part and where the prefill ran.
adm_line() { sed -n 's/^generate: prefilled \([0-9]*\) tokens (.*): \(admitted_bytes .*\), remote_stall.*/P \1: \2/p' "$1"; }
# adm_num FILE KEY: a number of that line.
adm_num() { adm_line "$1" | sed -n "s/.*$2 \([0-9.]*\).*/\1/p"; }
gmodes=("dense" "oasis" "oasis --drafter ngram" "proxy" "ondemand")
for i in "${!gmodes[@]}"; do
  # shellcheck disable=SC2086 # the mode's words are options
  timeout 60 "$cli" "${g260[@]}" --mode ${gmodes[$i]} --prefill >"$work/gl$i.txt" 2>"$work/gl$i.err" ||
    { fail "generate --prefill --mode ${gmodes[$i]}"; cat "$work/gl$i.err"; }
done
timeout 60 "$cli" "${g260[@]}" --mode dense >"$work/gplain.txt" 2>/dev/null
if [ -s "$work/gplain.txt" ] && cmp -s "$work/gplain.txt" "$work/gl0.txt"; then
  echo "ok   generate --prefill dense prints plain dense generate's text ($(wc -c <"$work/gl0.txt") bytes)"
else
  fail "generate --prefill --mode dense differs from plain dense generate"
fi
# Exact admission: 5 layers x 4 KV heads, 23 blocks of 1024 bytes, summaries 2 x 8 f32 per block.
P=$(adm_line "$work/gl1.err" | sed -n 's/^P \([0-9]*\):.*/\1/p')
nb=$(( (P + 15) / 16 ))
full=$((20 * nb * 1024)); adm_sparse=$((20 * nb * 64 + 20 * 9 * 1024)); adm_dense=$((20 * nb * 64 + full))
for i in "${!gmodes[@]}"; do
  want=$adm_sparse; [ "$i" -eq 0 ] && want=$adm_dense
  a=$(adm_num "$work/gl$i.err" admitted_bytes); f=$(adm_num "$work/gl$i.err" full_kv_bytes)
  rb=$(adm_num "$work/gl$i.err" remote_bytes)
  if [ "$P" != 354 ] || [ "$a" != "$want" ] || [ "$f" != "$full" ] || [ -z "$rb" ] ||
     { [ "$i" -eq 0 ] && [ "$rb" -ne 0 ]; } || { [ "$i" -ne 0 ] && [ "$rb" -le 0 ]; }; then
    fail "generate --prefill --mode ${gmodes[$i]}: P $P admitted $a (want $want) full $f (want $full) remote $rb"
  fi
done
for tls in tcp shm,tcp; do
  for i in "${!gmodes[@]}"; do
    # shellcheck disable=SC2086
    UCX_TLS=$tls timeout 60 "$cli" "${g260[@]}" --mode ${gmodes[$i]} --disaggregated >"$work/gd.txt" \
      2>"$work/gd.err"
    rc=$?
    if [ $rc -ne 0 ]; then fail "generate --disaggregated --mode ${gmodes[$i]} UCX_TLS=$tls (exit $rc)"; cat "$work/gd.err"
    elif ! cmp -s "$work/gl$i.txt" "$work/gd.txt"; then
      fail "generate --disaggregated --mode ${gmodes[$i]} UCX_TLS=$tls: text differs from --prefill"
    elif [ "$(adm_line "$work/gl$i.err")" != "$(adm_line "$work/gd.err")" ] ||
         ! grep -q "started by --disaggregated) (UCX_TLS=$tls)" "$work/gd.err"; then
      fail "generate --disaggregated --mode ${gmodes[$i]} UCX_TLS=$tls: admission differs:"; cat "$work/gl$i.err" "$work/gd.err"
    else
      echo "ok   generate --disaggregated --mode ${gmodes[$i]} UCX_TLS=$tls: same $(wc -c <"$work/gd.txt") bytes of text, $(adm_line "$work/gd.err")"
    fi
  done
done

# A standalone server with a token (port 0: it prints the port), --remote with the token file.
echo "tok-$$-$RANDOM" >"$work/token"
echo "wrong-token" >"$work/bad"
if UCX_TLS=tcp start_server "$m260" "$t512" --token-file "$work/token" --verbose; then
  UCX_TLS=tcp timeout 120 "$cli" "${b260[@]}" --prefill-tokens 384 --mode oasis --remote "127.0.0.1:$port" \
    --token-file "$work/token" --json - >"$work/rem.json" 2>"$work/rem.err" || { fail "--remote"; cat "$work/rem.err"; }
  timeout 120 "$cli" "${b260[@]}" --prefill-tokens 384 --mode oasis --json - >"$work/loc1.json" 2>/dev/null
  same "--remote with --token-file (tcp)" "$work/loc1.json" "$work/rem.json" dense oasis
  UCX_TLS=tcp expect_fail "wrong token" "wrong access token" "${b260[@]}" --prefill-tokens 384 --mode oasis \
    --remote "127.0.0.1:$port" --token-file "$work/bad"
  UCX_TLS=tcp expect_fail "no token" "no access token \\(this server needs one\\)" "${b260[@]}" --prefill-tokens 384 --mode oasis \
    --remote "127.0.0.1:$port"
  UCX_TLS=tcp timeout 60 "$cli" "${g260[@]}" --mode oasis --remote "127.0.0.1:$port" --token-file "$work/token" \
    >"$work/gr.txt" 2>"$work/gr.err"
  if cmp -s "$work/gl1.txt" "$work/gr.txt" && [ "$(adm_line "$work/gl1.err")" = "$(adm_line "$work/gr.err")" ]; then
    echo "ok   generate --remote with --token-file: same text and admission as --prefill"
  else
    fail "generate --remote with --token-file:"; cat "$work/gr.err"
  fi
  UCX_TLS=tcp expect_fail "generate, wrong token" "wrong access token" "${g260[@]}" --mode oasis \
    --remote "127.0.0.1:$port" --token-file "$work/bad"
  grep -q "job .* done: request" "$work/srv.err" || fail "the server logged no finished job"
  grep -q "request .* freed\|closed request" "$work/srv.err" || fail "the server logged no freed request"
  kill -TERM "$srv_pid"
  wait "$srv_pid"
  rc=$?
  srv_pid=
  [ $rc -eq 0 ] && echo "ok   serve exits 0 on SIGTERM" || fail "serve exited $rc on SIGTERM"
fi

# A server with another model: each job carries the decode node's model fingerprint and the server refuses
# a job of another model, one line on the client and a warning in the server's log. aidreams260K has
# another shape; the second is stories260K with the low byte of one weight changed (same shape, so only
# the fingerprint tells them apart).
ma="$shared/models/aidreams260K.bin"
ta="$shared/models/aidreams_tok512.bin"
cp "$m260" "$work/perturbed.bin"
off=$((28 + 4 * 1000)) # the low byte of the token embedding's 1001st weight (after the 28-byte header)
byte=$(od -An -tu1 -j "$off" -N1 "$m260" | tr -d ' ')
printf "\\$(printf '%03o' $(((byte ^ 1) & 255)))" | dd of="$work/perturbed.bin" bs=1 seek="$off" conv=notrunc 2>/dev/null
cmp -s "$m260" "$work/perturbed.bin" && fail "the perturbed model equals stories260K"
for other in "$ma:$ta" "$work/perturbed.bin:$t512"; do
  if [ -f "${other%%:*}" ] && UCX_TLS=tcp start_server "${other%%:*}" "${other##*:}"; then
    UCX_TLS=tcp expect_fail "a server of another model (${other%%:*})" "is not this server's model" \
      "${b260[@]}" --prefill-tokens 100 --mode oasis --remote "127.0.0.1:$port"
    kill -TERM "$srv_pid"
    wait "$srv_pid"
    rc=$?
    srv_pid=
    [ $rc -eq 0 ] || fail "serve exited $rc on SIGTERM after failed jobs"
    grep -q "warning: client .*job .* failed: .*is not this server's model" "$work/srv.err" ||
      fail "the server did not log the refused job"
  fi
done
# The same model served with a shorter context: a prefill past it fails as a job.
if UCX_TLS=tcp start_server "$m260" "$t512" --context 256; then
  UCX_TLS=tcp expect_fail "a job past the server's seq_len" "the job: .*needs 386\.\.seq_len 256" \
    "${b260[@]}" --prefill-tokens 384 --mode oasis --remote "127.0.0.1:$port"
  kill -TERM "$srv_pid"
  wait "$srv_pid"
  srv_pid=
fi

# kill -9 of the server mid-eval: eval fails with one UNAVAILABLE line naming the peer, within the timeout.
if UCX_TLS=tcp start_server "$m260" "$t512" --verbose; then
  UCX_TLS=tcp timeout 120 "$cli" "${b260[@]}" --prefill-tokens 100 --windows 8 --bytes 1500 --mode ondemand \
    --remote "127.0.0.1:$port" --json - >"$work/kill.json" 2>"$work/kill.err" &
  eval_pid=$!
  # After the dense run's first job: the run fails at a later admission (SUBMIT).
  for _ in $(seq 1 1200); do grep -q "job .* done" "$work/srv.err" && break; sleep 0.02; done
  kill -9 "$srv_pid"
  wait "$srv_pid" 2>/dev/null
  srv_pid=
  wait "$eval_pid"
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 124 ] || [ "$(wc -l <"$work/kill.err")" -ne 1 ] ||
     ! grep -q "127\.0\.0\.1:$port unavailable" "$work/kill.err"; then
    fail "eval after kill -9 of the server (exit $rc):"; cat "$work/kill.err"
  else
    echo "ok   server killed mid-admission: $(cat "$work/kill.err")"
  fi
fi
fi # small

# ... and mid-decode (stories15M, mode ondemand, K = 1: blocks are read over the network at decode steps):
# the step that needs a remote block fails with the sequence's source named and UNAVAILABLE from the peer.
if [ "$part" = 15m ] && UCX_TLS=tcp start_server "$m15" "$t32k" --verbose; then
  UCX_TLS=tcp timeout 120 "$cli" eval --model "$m15" --tokenizer "$t32k" --text "$text" --prefill-tokens 192 \
    --budget 1 --mode ondemand --remote "127.0.0.1:$port" --json - >"$work/kill.json" 2>"$work/kill.err" &
  eval_pid=$!
  # The dense run's job, then the ondemand run's: the kill lands while ondemand decodes.
  for _ in $(seq 1 3000); do [ "$(grep -c "job .* done" "$work/srv.err")" -ge 2 ] && break; sleep 0.02; done
  kill -9 "$srv_pid"
  wait "$srv_pid" 2>/dev/null
  srv_pid=
  wait "$eval_pid"
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 124 ] || [ "$(wc -l <"$work/kill.err")" -ne 1 ] ||
     ! grep -q "lost its KV source 'kv server 127\.0\.0\.1:$port'.*127\.0\.0\.1:$port unavailable" "$work/kill.err"; then
    fail "eval after kill -9 of the server mid-decode (exit $rc):"; cat "$work/kill.err"
  else
    echo "ok   server killed mid-decode: $(cat "$work/kill.err")"
  fi
fi

# The Done-when command on stories15M (P = 192; mode oasis to bound the time): same NLL as local.
if [ "$part" = 15m ]; then
  b15=(eval --model "$m15" --tokenizer "$t32k" --text "$text" --prefill-tokens 192 --mode oasis)
  timeout 300 "$cli" "${b15[@]}" --json - >"$work/l15.json" 2>"$work/l15.err" || { fail "15M local"; cat "$work/l15.err"; }
  UCX_TLS=tcp timeout 300 "$cli" "${b15[@]}" --disaggregated --json - >"$work/d15.json" 2>"$work/d15.err" ||
    { fail "15M --disaggregated"; cat "$work/d15.err"; }
  same "stories15M P=192 --disaggregated UCX_TLS=tcp" "$work/l15.json" "$work/d15.json" dense oasis
fi

# No server left behind by --disaggregated (processes of this session only: other users' are not ours).
if left=$(pgrep -s 0 -f "^oasiskv serve --listen 127\.0\.0\.1:0 "); then
  fail "a --disaggregated server is still running: pid(s) $left"
fi
[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
