# shellcheck shell=bash
# Two "hosts" on one machine: network namespaces joined by a veth pair. Sourced (bash) by
# src/launch/two_node_test.sh, src/data/two_node_scan_test.sh and bench/comm/veth_bed.sh:
#   . "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/netns.sh"
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2 (ip; tc for netns_shape). Defines
# functions only: sourcing it changes no shell option, trap or variable of the caller.

# netns_pair_up NS_A NS_B DEV_A DEV_B ADDR_A ADDR_B
# Creates namespaces NS_A and NS_B, a veth pair DEV_A (in NS_A, ADDR_A/24) <-> DEV_B (in NS_B,
# ADDR_B/24), and brings both ends and both loopbacks up. Returns 77 (ctest: skipped) with a
# one-line "SKIP: ..." on stdout when NS_A cannot be created (not root, no ip); otherwise the
# status of the first command that failed (the caller's teardown removes what was made), or 0.
netns_pair_up() {
  local a=$1 b=$2 va=$3 vb=$4 addr_a=$5 addr_b=$6 err
  if ! command -v ip >/dev/null; then
    echo "SKIP: ip (iproute2) not installed"
    return 77
  fi
  if ! err=$(ip netns add "$a" 2>&1); then
    echo "SKIP: cannot create network namespace $a ($err); run as root with CAP_NET_ADMIN and CAP_SYS_ADMIN"
    return 77
  fi
  ip netns add "$b" &&
    ip link add "$va" type veth peer name "$vb" &&
    ip link set "$va" netns "$a" &&
    ip link set "$vb" netns "$b" &&
    ip -n "$a" addr add "$addr_a/24" dev "$va" &&
    ip -n "$b" addr add "$addr_b/24" dev "$vb" &&
    ip -n "$a" link set lo up &&
    ip -n "$b" link set lo up &&
    ip -n "$a" link set "$va" up &&
    ip -n "$b" link set "$vb" up
}

# netns_pair_down NS_A NS_B
# Deletes both namespaces (a veth pair goes with them); absent ones are ignored. For an EXIT
# trap.
netns_pair_down() {
  ip netns del "$1" 2>/dev/null
  ip netns del "$2" 2>/dev/null
  return 0
}

# netns_shape NS DEV RATE DELAY
# Shapes DEV's egress in NS: a tbf bandwidth limit of RATE (tc units: 200mbit), under a netem
# delay of DELAY when DELAY is not 0 and the kernel has sch_netem (else a warning on stderr and
# the rate limit only). Returns tc's status.
netns_shape() {
  local ns=$1 dev=$2 rate=$3 delay=$4
  if [ "$delay" != 0ms ] && [ "$delay" != 0 ] &&
    tc -n "$ns" qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000 2>/dev/null; then
    tc -n "$ns" qdisc add dev "$dev" parent 1: handle 2: tbf rate "$rate" burst 64kb latency 100ms
  else
    [ "$delay" != 0ms ] && [ "$delay" != 0 ] &&
      echo "${0##*/}: no netem qdisc in this kernel: delay $delay not applied, rate limit only" >&2
    tc -n "$ns" qdisc add dev "$dev" root tbf rate "$rate" burst 64kb latency 100ms
  fi
}

# netns_job_token: a random TRAINSCOPE_JOB_TOKEN (32 hex digits) on stdout, the one secret that
# every node of a multi-node launch must share.
netns_job_token() {
  od -An -N16 -tx1 /dev/urandom | tr -d ' \n'
}
