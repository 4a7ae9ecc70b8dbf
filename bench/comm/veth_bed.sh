#!/usr/bin/env bash
# A communication-bound test bed on one machine: two network namespaces <name>_a and <name>_b
# joined by a veth pair whose both ends are shaped by `tc` (tbf: a bandwidth limit; netem
# delay on top when the kernel has sch_netem), so that two ranks, one per namespace, exchange
# every collective through a slow link (the wiring of scripts/lib/netns.sh, which the two-node
# tests src/launch/two_node_test.sh and src/data/two_node_scan_test.sh share).
#
# Usage (root, or CAP_NET_ADMIN + CAP_SYS_ADMIN):
#   veth_bed.sh up [--name N] [--rate 200mbit] [--delay 0ms] [--net 10.215.7]  (.1 and .2)
#   veth_bed.sh run [--name N] -- CMD ARGS...   CMD in both namespaces at once, with
#       BED_NODE_RANK (0 in _a, 1 in _b), BED_MASTER_ADDR (_a's address), BED_ADDR (its own),
#       BED_IFACE (its veth end) and TRAINSCOPE_JOB_TOKEN (random when unset) in the
#       environment; exits with the first non-zero status of the two, else 0
#   veth_bed.sh exec a|b [--name N] -- CMD ARGS...   CMD in one namespace
#   veth_bed.sh info [--name N]                       addresses and qdiscs
#   veth_bed.sh down [--name N]
# Exit status 77 (a ctest skip) with a one-line reason when namespaces cannot be created.
# Example, a 2-rank trainer run across the link:
#   veth_bed.sh up --rate 200mbit
#   veth_bed.sh run -- sh -c 'trainscope launch -n 1 --nnodes 2 --node-rank $BED_NODE_RANK \
#     --master-addr $BED_MASTER_ADDR --master-port 29433 --run-dir /tmp/bed$BED_NODE_RANK \
#     -- trainscope train --config cfg.json'
#   veth_bed.sh down
set -uo pipefail
# shellcheck source=scripts/lib/netns.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/netns.sh"  # netns_pair_up/down, netns_shape

cmd=${1:-}
[ $# -gt 0 ] && shift
name=tsbed rate=200mbit delay=0ms net=10.215.7 node=""
if [ "$cmd" = exec ]; then
  node=${1:-}
  [ $# -gt 0 ] && shift
fi
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --net) net=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "veth_bed.sh: unknown argument \"$1\" (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
done
a=${name}_a b=${name}_b va=${name}va vb=${name}vb
addr_a=$net.1 addr_b=$net.2
if [ "$cmd" = run ] || [ "$cmd" = exec ]; then  # the addresses `up` gave the bed
  addr_a=$(ip -n "$a" -4 -o addr show dev "$va" 2>/dev/null | awk '{print $4}' | cut -d/ -f1)
  addr_b=$(ip -n "$b" -4 -o addr show dev "$vb" 2>/dev/null | awk '{print $4}' | cut -d/ -f1)
  [ -n "$addr_a" ] && [ -n "$addr_b" ] || { echo "veth_bed.sh $cmd: bed $name is not up" >&2; exit 2; }
fi

case "$cmd" in
  up)
    if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
      echo "SKIP: ip or tc (iproute2) not installed"; exit 77
    fi
    if ip netns list 2>/dev/null | grep -qw "$a"; then
      echo "veth_bed.sh up: bed $name is already up (veth_bed.sh down --name $name)" >&2
      exit 2
    fi
    netns_pair_up "$a" "$b" "$va" "$vb" "$addr_a" "$addr_b" || exit $?
    set -e
    netns_shape "$a" "$va" "$rate" "$delay"
    netns_shape "$b" "$vb" "$rate" "$delay"
    echo "bed $name up: $a $addr_a ($va) <-> $b $addr_b ($vb), rate $rate, delay $delay"
    ;;
  down)
    netns_pair_down "$a" "$b"
    echo "bed $name down"
    ;;
  info)
    for ns in "$a" "$b"; do
      echo "$ns:"; ip -n "$ns" -br addr; tc -n "$ns" qdisc show
    done
    ;;
  exec)
    case "$node" in
      a) exec ip netns exec "$a" env BED_NODE_RANK=0 BED_MASTER_ADDR="$addr_a" BED_ADDR="$addr_a" BED_IFACE="$va" "$@" ;;
      b) exec ip netns exec "$b" env BED_NODE_RANK=1 BED_MASTER_ADDR="$addr_a" BED_ADDR="$addr_b" BED_IFACE="$vb" "$@" ;;
      *) echo "veth_bed.sh exec: expected a or b, got \"$node\"" >&2; exit 2 ;;
    esac
    ;;
  run)
    [ $# -gt 0 ] || { echo "veth_bed.sh run: no command after --" >&2; exit 2; }
    : "${TRAINSCOPE_JOB_TOKEN:=$(netns_job_token)}"
    export TRAINSCOPE_JOB_TOKEN
    ip netns exec "$a" env BED_NODE_RANK=0 BED_MASTER_ADDR="$addr_a" BED_ADDR="$addr_a" BED_IFACE="$va" "$@" &
    pid_a=$!
    ip netns exec "$b" env BED_NODE_RANK=1 BED_MASTER_ADDR="$addr_a" BED_ADDR="$addr_b" BED_IFACE="$vb" "$@" &
    pid_b=$!
    wait $pid_a; rc_a=$?
    wait $pid_b; rc_b=$?
    [ $rc_a -ne 0 ] && exit $rc_a
    exit $rc_b
    ;;
  *)
    echo "usage: veth_bed.sh up|down|run|exec a|b|info [--name N] [--rate R] [--delay D] [-- CMD...]" >&2
    exit 2
    ;;
esac
