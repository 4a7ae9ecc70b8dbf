#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces ts_a/ts_b joined by a veth pair. Node 0
# (in ts_a) and node 1 (in ts_b) each run `trainscope launch -n 2 --nnodes 2` of
# `trainscope selftest comm --backend gloo`; the 4 ranks meet through rank 0's store on
# ts_a's veth address (bound to that address only), and every collective crosses the veth.
# Both nodes get the same TRAINSCOPE_JOB_TOKEN, as multi-node launches require; meanwhile a
# stray client in ts_b without it sends garbage to the store, which must not hurt the job. Needs root (CAP_NET_ADMIN,
# CAP_SYS_ADMIN); exits 77 (ctest: skipped) with a clear message without them.
# Usage: two_node_test.sh /path/to/trainscope
set -uo pipefail
# shellcheck source=scripts/lib/netns.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/netns.sh"  # netns_pair_up/down, netns_job_token
bin=${1:?usage: two_node_test.sh TRAINSCOPE_BINARY}
tag=$$
a=ts_a_$tag b=ts_b_$tag
net=$((tag % 200 + 20))
addr_a=10.213.$net.1 addr_b=10.213.$net.2
tmp=$(mktemp -d /tmp/ts_two_node_XXXXXX)

cleanup() {
  netns_pair_down "$a" "$b"
  rm -rf "$tmp"
}
trap cleanup EXIT

netns_pair_up "$a" "$b" "va$tag" "vb$tag" "$addr_a" "$addr_b" || exit $?

common=(--nnodes 2 --master-addr "$addr_a" --master-port 29411 --stop-grace-s 2 -q --
        "$bin" selftest comm --backend gloo --ops all_reduce,all_gather,send_recv --sizes 8,64K
        --iters 2 --warmup 1 --seconds-per-size 0 --slow-rank-ratio 0 --timeout-s 20 --json)
TRAINSCOPE_JOB_TOKEN=$(netns_job_token)
export TRAINSCOPE_JOB_TOKEN
start=$(date +%s%N)
timeout 90 ip netns exec "$a" "$bin" launch -n 2 --node-rank 0 --run-dir "$tmp/a" "${common[@]}" &
pid_a=$!
timeout 90 ip netns exec "$b" "$bin" launch -n 2 --node-rank 1 --run-dir "$tmp/b" "${common[@]}" &
pid_b=$!
# The stray: connects from node 1 (retrying until the store is up) and sends a bogus frame.
timeout 20 ip netns exec "$b" bash -c "for i in \$(seq 100); do
    { exec 3<>/dev/tcp/$addr_a/29411; } 2>/dev/null && { printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; exit 0; }
    sleep 0.1; done; exit 1" &
pid_stray=$!
wait $pid_a; rc_a=$?
wait $pid_b; rc_b=$?
wait $pid_stray; rc_stray=$?
end=$(date +%s%N)

fail=0
if [ $rc_stray -ne 0 ]; then
  echo "FAIL: the stray client never reached the store at $addr_a:29411"
  fail=1
fi
if ! grep -q "rendezvous store: .* (further refusals" "$tmp/a/rank0/stderr.log"; then
  echo "FAIL: rank 0 did not report the refused stray client"
  fail=1
fi
if grep -rq "$TRAINSCOPE_JOB_TOKEN" "$tmp/a" "$tmp/b"; then
  echo "FAIL: the job token appears in a log or launch.json"
  fail=1
fi
if [ $rc_a -ne 0 ] || [ $rc_b -ne 0 ]; then
  echo "FAIL: launch exit codes: node 0 $rc_a, node 1 $rc_b"
  fail=1
fi
for r in 0 1; do
  [ -f "$tmp/a/rank$r/stdout.log" ] || { echo "FAIL: no log for rank $r on node 0"; fail=1; }
done
for r in 2 3; do
  [ -f "$tmp/b/rank$r/stdout.log" ] || { echo "FAIL: no log for rank $r on node 1 (global ranks 2, 3)"; fail=1; }
done
report="$tmp/a/rank0/stdout.log"
if ! /usr/bin/python3 - "$report" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["world_size"] == 4, doc["world_size"]
assert doc["passed"], doc["reason"]
assert len(doc["results"]) == 5 and all(r["correct"] for r in doc["results"])
print("two-node selftest: world_size 4, %d rows correct" % len(doc["results"]))
PY
then
  echo "FAIL: rank 0's report is not a passing 4-rank selftest"
  fail=1
fi
if [ $fail -ne 0 ]; then
  for f in "$tmp"/a/rank*/std*.log "$tmp"/b/rank*/std*.log; do echo "--- $f"; tail -5 "$f"; done
  exit 1
fi
echo "PASS: 2 nodes x 2 ranks over veth in $(( (end - start) / 1000000 )) ms"
