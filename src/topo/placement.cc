// Link bandwidth estimates, ring bottlenecks, and the placement of ranks onto devices.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "trainscope/topo/topo.h"

namespace trainscope::topo {

double LinkGbps(const Link& link, const BandwidthModel& m) {
  switch (link.cls) {
    case LinkClass::kNvLink:
      return link.nvlinks * m.nvlink_link_gbps;
    case LinkClass::kSio:
    case LinkClass::kHccs:
    case LinkClass::kHccsSw:
      return m.hccs_gbps;
    case LinkClass::kPix:
    case LinkClass::kPxb:
      return m.pcie_gbps;
    case LinkClass::kPhb:
      return 0.8 * m.pcie_gbps;
    case LinkClass::kNode:
      return 0.6 * m.pcie_gbps;
    case LinkClass::kSys:
      return 0.4 * m.pcie_gbps;
    case LinkClass::kSelf:
    case LinkClass::kUnknown:
      return 0;
  }
  return 0;
}

int LinkCloseness(const Link& link) { return static_cast<int>(link.cls); }

double Layout::min_bottleneck_gbps() const {
  double m = 0;
  bool any = false;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].size() < 2) continue;
    m = any ? std::min(m, bottleneck_gbps[g]) : bottleneck_gbps[g];
    any = true;
  }
  return m;
}

namespace {

// A link as one sortable integer: bandwidth first (to 1 MB/s), closeness second, so that of
// two classes with the same estimate the closer one wins.
int64_t TopoKey(const Link& link, const BandwidthModel& m) {
  return std::llround(LinkGbps(link, m) * 1000) * 16 + (15 - LinkCloseness(link));
}

// Whether the graph on k vertices (adj[v]: bitmask of neighbours) has a Hamiltonian cycle.
// Held-Karp over subsets that contain vertex 0: reach[mask] = the vertices a path from 0
// through exactly `mask` can end at. O(2^k k).
bool TopoHamiltonianCycle(const std::vector<uint32_t>& adj) {
  const int k = static_cast<int>(adj.size());
  if (k < 3) return k == 1 || (k == 2 && (adj[0] & 2u));
  std::vector<uint32_t> reach(size_t{1} << k, 0);
  reach[1] = 1;
  for (uint32_t mask = 1; mask < (1u << k); mask += 2) {  // masks holding vertex 0
    uint32_t ends = reach[mask];
    while (ends) {
      int v = __builtin_ctz(ends);
      ends &= ends - 1;
      uint32_t next = adj[v] & ~mask;
      while (next) {
        int w = __builtin_ctz(next);
        next &= next - 1;
        reach[mask | (1u << w)] |= 1u << w;
      }
    }
  }
  return (reach[(1u << k) - 1] & adj[0]) != 0;
}

// Groups larger than this are rated by their slowest pair instead of the best ring (the ring
// search is exponential in the group size).
constexpr int kTopoMaxRingSearch = 20;

// The best ring's slowest link through `group`, as (key, the link). Group of >= 2 devices.
std::pair<int64_t, Link> TopoRing(const Topology& topo, const std::vector<int>& group,
                                  const BandwidthModel& m) {
  const int k = static_cast<int>(group.size());
  std::vector<std::pair<int64_t, Link>> keys;
  int64_t lower = std::numeric_limits<int64_t>::max(), upper = lower;
  Link lower_link;
  for (int a = 0; a < k; ++a) {
    std::vector<int64_t> mine;
    for (int b = 0; b < k; ++b) {
      if (a == b) continue;
      const Link& l = topo.links[group[a]][group[b]];
      int64_t key = TopoKey(l, m);
      mine.push_back(key);
      if (a < b) keys.push_back({key, l});
      if (key < lower) {
        lower = key;
        lower_link = l;
      }
    }
    // Every device has two ring neighbours: the ring is no faster than its second-best link.
    std::sort(mine.rbegin(), mine.rend());
    upper = std::min(upper, mine[std::min<size_t>(1, mine.size() - 1)]);
  }
  if (k <= 3 || lower == upper || k > kTopoMaxRingSearch) return {lower, lower_link};
  std::sort(keys.begin(), keys.end(),
            [](const auto& x, const auto& y) { return x.first > y.first; });
  for (size_t t = 0; t < keys.size(); ++t) {
    const int64_t threshold = keys[t].first;
    if (threshold > upper || (t > 0 && threshold == keys[t - 1].first)) continue;
    if (threshold <= lower) break;
    std::vector<uint32_t> adj(k, 0);
    for (int a = 0; a < k; ++a) {
      for (int b = 0; b < k; ++b) {
        if (a != b && TopoKey(topo.links[group[a]][group[b]], m) >= threshold) adj[a] |= 1u << b;
      }
    }
    if (TopoHamiltonianCycle(adj)) return keys[t];
  }
  return {lower, lower_link};
}

// Bottleneck assignment between two groups of equal size: the pairing of a[i] with b[p[i]]
// whose slowest pair is fastest (Megatron's pipeline sends go from TP rank i of a stage to
// TP rank i of the next). Returns the key and writes b reordered to match a.
int64_t TopoMatch(const Topology& topo, const std::vector<int>& a, const std::vector<int>& b,
                  const BandwidthModel& m, std::vector<int>* b_matched) {
  const int k = static_cast<int>(a.size());
  std::vector<int64_t> thresholds;
  for (int x : a)
    for (int y : b) thresholds.push_back(TopoKey(topo.links[x][y], m));
  std::sort(thresholds.rbegin(), thresholds.rend());
  thresholds.erase(std::unique(thresholds.begin(), thresholds.end()), thresholds.end());
  for (int64_t th : thresholds) {
    // Kuhn's augmenting paths on the pairs at least as fast as th.
    std::vector<int> match_b(k, -1);
    std::function<bool(int, std::vector<char>&)> augment = [&](int i, std::vector<char>& seen) {
      for (int j = 0; j < k; ++j) {
        if (seen[j] || TopoKey(topo.links[a[i]][b[j]], m) < th) continue;
        seen[j] = 1;
        if (match_b[j] < 0 || augment(match_b[j], seen)) {
          match_b[j] = i;
          return true;
        }
      }
      return false;
    };
    int matched = 0;
    for (int i = 0; i < k; ++i) {
      std::vector<char> seen(k, 0);
      if (augment(i, seen)) ++matched;
    }
    if (matched == k) {
      b_matched->assign(k, -1);
      for (int j = 0; j < k; ++j) (*b_matched)[match_b[j]] = b[j];
      return th;
    }
  }
  *b_matched = b;
  return thresholds.empty() ? 0 : thresholds.back();
}

// Lexicographic objective of a TP grouping: the slowest group, then the sum over groups.
struct TopoScore {
  int64_t min = -1;
  int64_t sum = -1;
  bool operator<(const TopoScore& o) const { return min != o.min ? min < o.min : sum < o.sum; }
};

class TopoGroupSearch {
 public:
  TopoGroupSearch(const Topology& topo, const BandwidthModel& m, int tp)
      : topo_(topo), m_(m), tp_(tp) {
    const int n = static_cast<int>(topo.devices.size());
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b)
        if (a != b) max_key_ = std::max(max_key_, TopoKey(topo.links[a][b], m));
  }

  int64_t GroupKey(uint64_t mask) {
    auto it = memo_.find(mask);
    if (it != memo_.end()) return it->second;
    std::vector<int> g;
    for (uint64_t x = mask; x; x &= x - 1) g.push_back(__builtin_ctzll(x));
    int64_t key = TopoRing(topo_, g, m_).first;
    memo_[mask] = key;
    return key;
  }

  TopoScore Score(const std::vector<std::vector<int>>& groups) {
    TopoScore s{std::numeric_limits<int64_t>::max(), 0};
    for (const auto& g : groups) {
      uint64_t mask = 0;
      for (int d : g) mask |= uint64_t{1} << d;
      int64_t key = GroupKey(mask);
      s.min = std::min(s.min, key);
      s.sum += key;
    }
    return s;
  }

  // Branch and bound over partitions: the lowest free device is either skipped (while
  // skips remain) or starts the next group with tp - 1 more free devices. A branch is cut
  // when even all-fastest groups for the rest could not beat the incumbent.
  void Exhaustive(uint64_t free, int groups_left, int skips_left, TopoScore cur) {
    if (groups_left == 0) {
      if (best_ < cur) {
        best_ = cur;
        best_groups_ = current_;
      }
      return;
    }
    TopoScore bound{cur.min, cur.sum + groups_left * max_key_};
    if (!(best_ < bound)) return;
    const int d = __builtin_ctzll(free);
    if (skips_left > 0) Exhaustive(free & (free - 1), groups_left, skips_left - 1, cur);
    std::vector<int> members = {d};
    Choose(free & (free - 1), tp_ - 1, uint64_t{1} << d, &members, groups_left, skips_left, cur,
           free & (free - 1));
  }

  // Greedy for large servers: each group starts from the fastest free pair and grows by the
  // free device whose slowest link to the members is fastest.
  std::vector<std::vector<int>> Greedy(int ngroups) {
    const int n = static_cast<int>(topo_.devices.size());
    std::vector<char> used(n, 0);
    std::vector<std::vector<int>> groups;
    for (int g = 0; g < ngroups; ++g) {
      std::vector<int> members;
      int64_t best = -1;
      int first = -1, second = -1;
      for (int a = 0; a < n; ++a) {
        if (used[a]) continue;
        if (first < 0) first = a;
        for (int b = a + 1; b < n && tp_ > 1; ++b) {
          if (!used[b] && TopoKey(topo_.links[a][b], m_) > best) {
            best = TopoKey(topo_.links[a][b], m_);
            first = a;
            second = b;
          }
        }
      }
      members.push_back(first);
      used[first] = 1;
      if (second >= 0) {
        members.push_back(second);
        used[second] = 1;
      }
      while (static_cast<int>(members.size()) < tp_) {
        int pick = -1;
        int64_t pick_key = -1;
        for (int c = 0; c < n; ++c) {
          if (used[c]) continue;
          int64_t worst = std::numeric_limits<int64_t>::max();
          for (int x : members) worst = std::min(worst, TopoKey(topo_.links[x][c], m_));
          if (worst > pick_key) {
            pick_key = worst;
            pick = c;
          }
        }
        members.push_back(pick);
        used[pick] = 1;
      }
      std::sort(members.begin(), members.end());
      groups.push_back(members);
    }
    return groups;
  }

  void SetIncumbent(const std::vector<std::vector<int>>& groups) {
    best_ = Score(groups);
    best_groups_ = groups;
  }
  const std::vector<std::vector<int>>& best_groups() const { return best_groups_; }

 private:
  void Choose(uint64_t candidates, int need, uint64_t mask, std::vector<int>* members,
              int groups_left, int skips_left, TopoScore cur, uint64_t free_after_first) {
    if (need == 0) {
      int64_t key = GroupKey(mask);
      TopoScore next{std::min(cur.min, key), cur.sum + key};
      if (!(best_ < TopoScore{next.min, next.sum + (groups_left - 1) * max_key_})) return;
      current_.push_back(*members);
      Exhaustive(free_after_first & ~mask, groups_left - 1, skips_left, next);
      current_.pop_back();
      return;
    }
    for (uint64_t c = candidates; c; c &= c - 1) {
      const int d = __builtin_ctzll(c);
      if (__builtin_popcountll(c) < need) return;
      members->push_back(d);
      Choose(c & (c - 1), need - 1, mask | (uint64_t{1} << d), members, groups_left, skips_left,
             cur, free_after_first);
      members->pop_back();
    }
  }

  const Topology& topo_;
  const BandwidthModel& m_;
  const int tp_;
  int64_t max_key_ = 0;
  std::unordered_map<uint64_t, int64_t> memo_;
  std::vector<std::vector<int>> current_;
  TopoScore best_;
  std::vector<std::vector<int>> best_groups_;
};

// Pipeline chains: dp chains of pp TP groups each, built greedily (each chain starts at the
// lowest free group and takes the free group with the fastest hop next), members of a group
// reordered so that TP rank i of a stage faces the device it is fastest to. Returns the rank
// order.
std::vector<int> TopoChain(const Topology& topo, std::vector<std::vector<int>> groups, int pp,
                           const BandwidthModel& m) {
  const int ngroups = static_cast<int>(groups.size());
  const int dp = ngroups / pp;
  std::vector<char> used(ngroups, 0);
  std::vector<std::vector<std::vector<int>>> chains(dp);
  for (int d = 0; d < dp; ++d) {
    int start = 0;
    while (used[start]) ++start;
    used[start] = 1;
    chains[d].push_back(groups[start]);
    for (int s = 1; s < pp; ++s) {
      int pick = -1;
      int64_t pick_key = -1;
      std::vector<int> pick_order;
      for (int g = 0; g < ngroups; ++g) {
        if (used[g]) continue;
        std::vector<int> matched;
        int64_t key = TopoMatch(topo, chains[d].back(), groups[g], m, &matched);
        if (key > pick_key) {
          pick_key = key;
          pick = g;
          pick_order = matched;
        }
      }
      used[pick] = 1;
      chains[d].push_back(pick_order);
    }
  }
  std::vector<int> order;
  for (int s = 0; s < pp; ++s)
    for (int d = 0; d < dp; ++d)
      order.insert(order.end(), chains[d][s].begin(), chains[d][s].end());
  return order;
}

// Whether layout a beats b: the slowest TP group, the sum over groups, then the slowest
// pipeline hop.
bool TopoBetter(const Layout& a, const Layout& b) {
  double sa = 0, sb = 0;
  for (double x : a.bottleneck_gbps) sa += x;
  for (double x : b.bottleneck_gbps) sb += x;
  if (a.min_bottleneck_gbps() != b.min_bottleneck_gbps())
    return a.min_bottleneck_gbps() > b.min_bottleneck_gbps();
  if (sa != sb) return sa > sb;
  return a.pipeline_gbps > b.pipeline_gbps;
}

}  // namespace

double RingBottleneckGbps(const Topology& topo, const std::vector<int>& group,
                          const BandwidthModel& model, std::string* link) {
  if (group.size() < 2) {
    if (link) link->clear();
    return 0;
  }
  std::pair<int64_t, Link> r = TopoRing(topo, group, model);
  if (link) *link = r.second.token;
  return LinkGbps(r.second, model);
}

Layout EvaluateOrder(const Topology& topo, const std::vector<int>& order, int tp, int pp,
                     const BandwidthModel& model) {
  Layout l;
  l.order = order;
  const int ngroups = static_cast<int>(order.size()) / tp;
  for (int g = 0; g < ngroups; ++g) {
    std::vector<int> group(order.begin() + g * tp, order.begin() + (g + 1) * tp);
    std::string link;
    l.bottleneck_gbps.push_back(RingBottleneckGbps(topo, group, model, &link));
    l.bottleneck_link.push_back(link);
    l.groups.push_back(std::move(group));
  }
  if (pp > 1) {
    const int dp = ngroups / pp;
    int64_t worst = std::numeric_limits<int64_t>::max();
    for (int s = 0; s + 1 < pp; ++s) {
      for (int d = 0; d < dp; ++d) {
        for (int i = 0; i < tp; ++i) {
          const Link& link =
              topo.links[order[(s * dp + d) * tp + i]][order[((s + 1) * dp + d) * tp + i]];
          if (TopoKey(link, model) < worst) {
            worst = TopoKey(link, model);
            l.pipeline_gbps = LinkGbps(link, model);
            l.pipeline_link = link.token;
          }
        }
      }
    }
  }
  return l;
}

absl::StatusOr<Placement> PlaceRanks(const Topology& topo, const PlacementOptions& o) {
  const int n = static_cast<int>(topo.devices.size());
  const int ranks = o.ranks > 0 ? o.ranks : n;
  if (o.tp < 1 || o.pp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp ", o.tp, " and --pp ", o.pp, " must be >= 1"));
  }
  if (n > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("the topology has ", n, " devices; placement handles at most 64"));
  }
  if (ranks > n) {
    return absl::InvalidArgumentError(
        absl::StrCat(ranks, " ranks need ", ranks, " devices; the topology has ", n));
  }
  if (ranks % (o.tp * o.pp) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp ", o.tp, " x --pp ", o.pp, " does not divide the ", ranks, " ranks"));
  }
  Placement p;
  p.options = o;
  p.options.ranks = ranks;
  std::vector<int> naive(ranks);
  for (int i = 0; i < ranks; ++i) naive[i] = i;
  p.naive = EvaluateOrder(topo, naive, o.tp, o.pp, o.bandwidth);

  const int ngroups = ranks / o.tp;
  std::vector<std::vector<int>> groups = p.naive.groups;
  if (o.tp > 1) {
    TopoGroupSearch search(topo, o.bandwidth, o.tp);
    search.SetIncumbent(p.naive.groups);
    p.exhaustive = n <= std::min(o.exhaustive_max_devices, 64);
    if (p.exhaustive) {
      uint64_t all = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
      search.Exhaustive(all, ngroups, n - ranks, TopoScore{std::numeric_limits<int64_t>::max(), 0});
    } else {
      std::vector<std::vector<int>> greedy = search.Greedy(ngroups);
      if (search.Score(p.naive.groups) < search.Score(greedy)) search.SetIncumbent(greedy);
    }
    groups = search.best_groups();
    for (auto& g : groups) std::sort(g.begin(), g.end());
  }
  std::vector<int> order;
  if (o.pp > 1) {
    order = TopoChain(topo, groups, o.pp, o.bandwidth);
  } else {
    for (const auto& g : groups) order.insert(order.end(), g.begin(), g.end());
  }
  Layout proposed = EvaluateOrder(topo, order, o.tp, o.pp, o.bandwidth);
  p.proposed = TopoBetter(proposed, p.naive) ? proposed : p.naive;
  return p;
}

}  // namespace trainscope::topo
