#!/usr/bin/env bash
# The two-host path: two network namespaces joined by a veth pair (addresses
# 10.211.N.1 and .2, inside the namespaces only), the KV server in one, the
# client in the other, over tcp. Checks: a server on a non-loopback address
# refuses to start without a token; with one, a client in the other namespace
# reads a batch of blocks (every byte checked) through the server (AUTO picks
# push on tcp); a wrong token is refused. Skipped (exit 77, with the reason)
# where namespaces cannot be created (not root, no CAP_NET_ADMIN, no ip). The
# namespaces and the veth pair are always removed (trap).
#   test_remote_netns.sh PATH/remote_peer
set -u
peer=${1:?usage: test_remote_netns.sh PATH/remote_peer}
skip() {
  echo "SKIP: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "creating network namespaces needs root (CAP_NET_ADMIN)"
command -v ip >/dev/null 2>&1 || skip "ip (iproute2) is not installed"

id=$$
ns_s=okv-srv-$id
ns_c=okv-cli-$id
veth_s=okvs$id # interface names: at most 15 characters
veth_c=okvc$id
net=10.211.$((id % 250 + 1))
token=netns-token-$id
srv_pid=
tmp=$(mktemp -d)
cleanup() {
  [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null
  ip netns del "$ns_s" 2>/dev/null
  ip netns del "$ns_c" 2>/dev/null
  ip link del "$veth_s" 2>/dev/null # in case it was never moved into a namespace
  rm -rf "$tmp"
}
trap cleanup EXIT

ip netns add "$ns_s" 2>"$tmp/err" || skip "cannot create a network namespace: $(head -n 1 "$tmp/err")"
ip netns add "$ns_c" 2>"$tmp/err" || skip "cannot create a network namespace: $(head -n 1 "$tmp/err")"
ip link add "$veth_s" type veth peer name "$veth_c" 2>"$tmp/err" ||
  skip "cannot create a veth pair: $(head -n 1 "$tmp/err")"
fail() {
  echo "FAIL: $*"
  for f in "$tmp"/*.log; do [ -f "$f" ] && sed "s|^|  $(basename "$f"): |" "$f"; done
  exit 1
}
ip link set "$veth_s" netns "$ns_s" || fail "moving $veth_s into $ns_s"
ip link set "$veth_c" netns "$ns_c" || fail "moving $veth_c into $ns_c"
ip -n "$ns_s" addr add "$net.1/24" dev "$veth_s" || fail "address in $ns_s"
ip -n "$ns_c" addr add "$net.2/24" dev "$veth_c" || fail "address in $ns_c"
for ns in "$ns_s" "$ns_c"; do
  ip -n "$ns" link set lo up || fail "lo up in $ns"
done
ip -n "$ns_s" link set "$veth_s" up || fail "link up in $ns_s"
ip -n "$ns_c" link set "$veth_c" up || fail "link up in $ns_c"

export UCX_TLS=tcp UCX_LOG_LEVEL=error UCX_WARN_UNUSED_ENV_VARS=n

# 1. No token on a non-loopback address: refused at start.
if ip netns exec "$ns_s" timeout 20 "$peer" serve --addr "$net.1" >"$tmp/notoken.log" 2>&1; then
  fail "a server on $net.1 without a token started"
fi
grep -q "needs an access token" "$tmp/notoken.log" || fail "no reason given for refusing to start without a token"

# 2. The server in its namespace (stdin from a fifo: it serves until the fifo closes).
mkfifo "$tmp/in"
ip netns exec "$ns_s" timeout 60 "$peer" serve --addr "$net.1" --token "$token" --requests 2 --bytes 8388608 \
  <"$tmp/in" >"$tmp/server.out" 2>"$tmp/server.log" &
srv_pid=$!
exec 3>"$tmp/in" # keep the fifo open
port=
for _ in $(seq 1 200); do
  port=$(sed -n 's/^PORT \([0-9]*\)$/\1/p' "$tmp/server.out" | head -n 1)
  [ -n "$port" ] && break
  kill -0 "$srv_pid" 2>/dev/null || fail "the server exited early"
  sleep 0.1
done
[ -n "$port" ] || fail "the server did not report its port"

# 3. A client in the other namespace: request 1, 512 random blocks, every byte checked.
out=$(ip netns exec "$ns_c" timeout 30 "$peer" client --addr "$net.1" --port "$port" --token "$token" \
  --request 1 --gets 512 2>"$tmp/client.log") || fail "the client in $ns_c failed (exit $?)"
case "$out" in
  "OK 4194304 push") ;;
  *) fail "unexpected client output '$out'" ;;
esac
echo "client in $ns_c read 512 blocks from $net.1:$port: $out"

# 4. A wrong token is refused; the server keeps serving (request 2 afterwards).
if ip netns exec "$ns_c" timeout 30 "$peer" client --addr "$net.1" --port "$port" --token "wrong-$token" \
  --request 2 --gets 8 >"$tmp/wrong.out" 2>"$tmp/wrong.log"; then
  fail "a client with a wrong token was served"
fi
grep -q "wrong access token" "$tmp/wrong.log" || fail "the wrong token was not refused with its reason"
out=$(ip netns exec "$ns_c" timeout 30 "$peer" client --addr "$net.1" --port "$port" --token "$token" \
  --request 2 --gets 64 2>"$tmp/client2.log") || fail "the server did not serve a good client after a refusal"
[ "$out" = "OK 524288 push" ] || fail "unexpected client output '$out'"

exec 3>&- # the server ends when its stdin closes
wait "$srv_pid" || fail "the server exited with an error"
srv_pid=
echo "PASS: two namespaces over a veth pair ($net.0/24), token checked"
