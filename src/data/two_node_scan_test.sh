#!/usr/bin/env bash
# `data scan --distributed` across two "hosts" on one machine: network namespaces ts_a/ts_b
# joined by a veth pair (as src/launch/two_node_test.sh). Node 0 (in ts_a) and node 1 (in
# ts_b) each run `trainscope launch -n 1 --nnodes 2` of the distributed scan of the same
# corpus (tests/data_distributed_test.py's, byte-range-split JSONL and whole .gz/.txt), so
# every exchange crosses the veth; rank 0's report must equal the single-process scan's (but
# wall_s) and its verdicts must be byte-identical. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN);
# exits 77 (ctest: skipped) without.
# Usage: two_node_scan_test.sh /path/to/trainscope /path/to/tests/data_distributed_test.py
set -uo pipefail
# shellcheck source=scripts/lib/netns.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/netns.sh"  # netns_pair_up/down, netns_job_token
bin=${1:?usage: two_node_scan_test.sh TRAINSCOPE_BINARY DATA_DISTRIBUTED_TEST_PY}
corpus_py=${2:?usage: two_node_scan_test.sh TRAINSCOPE_BINARY DATA_DISTRIBUTED_TEST_PY}
tag=$$
a=ts_sa_$tag b=ts_sb_$tag
net=$((tag % 200 + 20))
addr_a=10.214.$net.1 addr_b=10.214.$net.2
tmp=$(mktemp -d /tmp/ts_two_node_scan_XXXXXX)

cleanup() {
  netns_pair_down "$a" "$b"
  rm -rf "$tmp"
}
trap cleanup EXIT

netns_pair_up "$a" "$b" "sa$tag" "sb$tag" "$addr_a" "$addr_b" || exit $?
/usr/bin/python3 -c "import sys; sys.path.insert(0, sys.argv[1]); import data_distributed_test as t; t.make_corpus(sys.argv[2])" \
  "$(dirname "$corpus_py")" "$tmp" || exit $?

inputs=("$tmp/a.jsonl" "$tmp/b.jsonl.gz" "$tmp/c.txt" "$tmp/d.jsonl")
export TRAINSCOPE_NO_PROGRESS=1
"$bin" data scan "${inputs[@]}" --json --fail-on none --threads 1 --verdicts "$tmp/single.verdicts" \
  > "$tmp/single.json"
rc_single=$?
common=(--nnodes 2 --master-addr "$addr_a" --master-port 29412 --stop-grace-s 2 -q --
        "$bin" data scan "${inputs[@]}" --json --fail-on none --threads 1 --distributed
        --comm-timeout 60 --verdicts "$tmp/dist.verdicts")
TRAINSCOPE_JOB_TOKEN=$(netns_job_token)
export TRAINSCOPE_JOB_TOKEN
timeout 90 ip netns exec "$a" "$bin" launch -n 1 --node-rank 0 --run-dir "$tmp/na" "${common[@]}" &
pid_a=$!
timeout 90 ip netns exec "$b" "$bin" launch -n 1 --node-rank 1 --run-dir "$tmp/nb" "${common[@]}" &
pid_b=$!
wait $pid_a; rc_a=$?
wait $pid_b; rc_b=$?

fail=0
if [ $rc_single -ne 0 ] || [ $rc_a -ne 0 ] || [ $rc_b -ne 0 ]; then
  echo "FAIL: exit codes: single $rc_single, node 0 $rc_a, node 1 $rc_b"
  fail=1
fi
if ! /usr/bin/python3 - "$tmp/single.json" "$tmp/na/rank0/stdout.log" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
dist = b.pop("distributed")
assert dist["ranks"] == 2, dist
for d in (a, b):
    d.pop("wall_s")
assert a == b, "reports differ"
print("two-node scan: 2 ranks over veth, %d docs, %d exact and %d near duplicates, "
      "%.0f B/doc exchanged, same report" % (a["docs"], a["exact_duplicate_docs"],
                                            a["near_duplicate_docs"], dist["exchange_bytes_per_doc"]))
PY
then
  echo "FAIL: rank 0's report differs from the single-process scan"
  fail=1
fi
if ! cmp -s "$tmp/single.verdicts" "$tmp/dist.verdicts"; then
  echo "FAIL: verdicts differ from the single-process scan"
  fail=1
fi
if [ $fail -ne 0 ]; then
  for f in "$tmp"/na/rank*/std*.log "$tmp"/nb/rank*/std*.log; do echo "--- $f"; tail -5 "$f"; done
  exit 1
fi
echo "PASS: distributed scan over 2 nodes (veth) equals the single-process scan"
