// Process groups and their membership, from every dump's pg_config.
//
// A group is named the same on every member rank, but two different groups may share a name
// when each rank only knows its own (fr_trace's tests: sub group "1" is [0] on rank 0 and
// [1] on rank 1). So a group is a (name, member set) pair, and only the views of ranks that
// are members by their own view count. Views of one name that overlap but differ are a
// membership disagreement: the view most ranks hold is taken, the others are named.
// Groups seen in entries but absent from every pg_config get the ranks whose entries use
// them (and, for the default group "0", every rank of the world). An unnamed pg_config
// entry (torch's gloo dumps) is no group.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "hang/analysis_internal.h"

namespace trainscope::hang::internal {
namespace {

std::string RanksText(const std::vector<int>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "]";
}

bool Overlap(const std::vector<int>& a, const std::vector<int>& b) {
  for (int x : a)
    if (std::binary_search(b.begin(), b.end(), x)) return true;
  return false;
}

// Numeric names in numeric order ("0" < "1" < "10"), then the others by name.
bool NameLess(const std::string& a, const std::string& b) {
  bool na = !a.empty() && a.size() < 10 && a.find_first_not_of("0123456789") == std::string::npos;
  bool nb = !b.empty() && b.size() < 10 && b.find_first_not_of("0123456789") == std::string::npos;
  if (na != nb) return na;
  if (na) return std::atoi(a.c_str()) < std::atoi(b.c_str());
  return a < b;
}

}  // namespace

std::vector<Group> BuildGroups(const std::vector<Dump>& dumps,
                               std::vector<MembershipDisagreement>* disagreements) {
  // name -> member set -> ranks holding that view (members by their own view).
  std::map<std::string, std::map<std::vector<int>, std::vector<int>>> views;
  std::map<std::string, std::string> desc;
  std::map<std::string, std::set<int>> users;  // ranks with entries of the group
  std::set<int> have;
  int world = 0;
  for (const Dump& d : dumps) {
    have.insert(d.rank);
    world = std::max({world, d.world_size, d.rank + 1});
    for (const auto& [name, cfg] : d.pg_config) {
      // Unnamed: torch 2.15's ProcessGroupGloo registers its group before torch.distributed
      // names it, as "" with group-local ranks (the last group built wins). Not a group, but
      // local ranks are below the world size.
      if (name.empty()) {
        for (int r : cfg.ranks) world = std::max(world, r + 1);
        continue;
      }
      std::vector<int> ranks = cfg.ranks;
      std::sort(ranks.begin(), ranks.end());
      ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
      if (!ranks.empty() && std::binary_search(ranks.begin(), ranks.end(), d.rank))
        views[name][ranks].push_back(d.rank);
      if (!cfg.desc.empty()) desc.emplace(name, cfg.desc);
    }
    for (const Entry& e : d.entries) {
      users[e.pg_name].insert(d.rank);
      if (!e.pg_desc.empty()) desc.emplace(e.pg_name, e.pg_desc);
    }
  }
  std::vector<Group> groups;
  for (auto& [name, by_set] : views) {
    // Largest views first; a view overlapping an already taken one is a disagreement.
    std::vector<std::pair<std::vector<int>, std::vector<int>>> order(by_set.begin(), by_set.end());
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return a.second.size() > b.second.size();
    });
    std::vector<const std::vector<int>*> taken;
    for (const auto& [set, holders] : order) {
      const std::vector<int>* clash = nullptr;
      for (const auto* t : taken)
        if (Overlap(*t, set)) clash = t;
      if (clash) {
        disagreements->push_back({name, holders, RanksText(*clash), RanksText(set)});
        continue;
      }
      taken.push_back(&set);
      Group g;
      g.name = name;
      g.desc = desc.count(name) ? desc[name] : "";
      g.members = set;
      g.from_config = true;
      groups.push_back(std::move(g));
    }
  }
  for (const auto& [name, ranks] : users) {
    if (views.count(name)) continue;
    Group g;
    g.name = name;
    g.desc = desc.count(name) ? desc[name] : "";
    g.members.assign(ranks.begin(), ranks.end());
    if (name == "0" && world <= (1 << 16)) {  // a larger "world" is a corrupt rank number
      g.members.clear();
      for (int r = 0; r < world; ++r) g.members.push_back(r);
    }
    groups.push_back(std::move(g));
  }
  for (Group& g : groups) {
    for (int r : g.members) (have.count(r) ? g.with_dump : g.missing).push_back(r);
  }
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    if (a.name != b.name) return NameLess(a.name, b.name);
    return a.members < b.members;
  });
  for (size_t i = 0; i < groups.size(); ++i) groups[i].order = static_cast<int>(i);
  return groups;
}

}  // namespace trainscope::hang::internal
