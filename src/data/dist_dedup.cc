// The duplicate resolution of the distributed scan (distributed.cc): each exact-duplicate key
// and each LSH bucket has an owner rank; the ranks send their keys and band hashes to the
// owners with all-to-all exchanges, the owners answer or verify, and rank 0 replays the
// single scan's union-find over the verified buckets (see dist_dedup.h).
#include "data/dist_dedup.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "data/dist_exchange.h"
#include "trainscope/comm/comm.h"
#include "trainscope/core/status.h"

namespace trainscope::data {
namespace {

// Owner rank of an exact-duplicate key and of an LSH bucket (band, hash). The hashes are
// XXH3 values already; the band is mixed in so one band's buckets do not all share a rank
// pattern with another's.
int DistKeyOwner(uint64_t hash, int world) { return static_cast<int>(hash % world); }
int DistBucketOwner(uint32_t band, uint64_t hash, int world) {
  return static_cast<int>((hash ^ (band * 0x9E3779B97F4A7C15ull)) % world);
}

// --- exact duplicates: (key, document) to the key's owner, which answers with the first
// document of the key. kind 0: raw bytes, 1: normalised.
struct DistKeyRecord {
  uint64_t hash;
  uint32_t doc;
  uint32_t kind;
};

}  // namespace

absl::Status DistResolveExact(const ScanShare& share, uint32_t first_gid, comm::Communicator* comm,
                              std::vector<uint32_t>* raw_first, std::vector<uint32_t>* norm_first,
                              uint64_t* sent) {
  const int world = comm->world_size();
  const size_t n = share.raw_hash.size();
  std::vector<std::vector<DistKeyRecord>> out(world);
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> where(world);  // (local doc, kind)
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t keys[2] = {share.raw_hash[i], share.norm_hash[i]};
    for (uint32_t kind = 0; kind < 2; ++kind) {
      const int o = DistKeyOwner(keys[kind], world);
      out[o].push_back({keys[kind], first_gid + i, kind});
      where[o].emplace_back(i, kind);
    }
  }
  std::vector<std::vector<DistKeyRecord>> in;
  TS_RETURN_IF_ERROR(AllToAllRecords(comm, out, &in, sent));
  out = {};
  absl::flat_hash_map<uint64_t, uint32_t> first[2];
  for (const auto& from : in) {
    for (const auto& r : from) {
      auto it = first[r.kind].try_emplace(r.hash, r.doc);
      if (!it.second) it.first->second = std::min(it.first->second, r.doc);
    }
  }
  std::vector<std::vector<uint32_t>> answer(world);
  for (int s = 0; s < world; ++s) {
    answer[s].reserve(in[s].size());
    for (const auto& r : in[s]) answer[s].push_back(first[r.kind].at(r.hash));
  }
  in = {};
  first[0] = {};
  first[1] = {};
  std::vector<std::vector<uint32_t>> back;
  TS_RETURN_IF_ERROR(AllToAllRecords(comm, answer, &back, sent));
  raw_first->assign(n, ScanResult::kNoDoc);
  norm_first->assign(n, ScanResult::kNoDoc);
  for (int o = 0; o < world; ++o) {
    if (back[o].size() != where[o].size()) {
      return absl::InternalError("exact-duplicate answers do not match the questions");
    }
    for (size_t k = 0; k < back[o].size(); ++k) {
      const auto [i, kind] = where[o][k];
      (kind == 0 ? *raw_first : *norm_first)[i] = back[o][k];
    }
  }
  return absl::OkStatus();
}

namespace {

// Union-find over global document numbers, keep-first (the root is the smallest), holding
// only the documents a union touched.
class DistUnionFind {
 public:
  uint32_t Find(uint32_t x) {
    uint32_t r = x;
    for (auto it = parent_.find(r); it != parent_.end() && it->second != r; it = parent_.find(r)) {
      r = it->second;
    }
    while (x != r) {
      auto it = parent_.find(x);
      const uint32_t next = it->second;
      it->second = r;
      x = next;
    }
    return r;
  }
  void Union(uint32_t a, uint32_t b) {
    a = Find(a);
    b = Find(b);
    if (a == b) return;
    if (a < b) std::swap(a, b);
    parent_[a] = b;
    parent_.try_emplace(b, b);
  }
  // (document, root) of every document whose root is another.
  std::vector<std::pair<uint32_t, uint32_t>> NonRoots() {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    std::vector<uint32_t> keys;
    for (const auto& [k, v] : parent_) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    for (uint32_t k : keys) {
      const uint32_t r = Find(k);
      if (r != k) out.emplace_back(k, r);
    }
    return out;
  }

 private:
  absl::flat_hash_map<uint32_t, uint32_t> parent_;
};

// --- near duplicates.
struct DistBandRecord {
  uint64_t hash;
  uint32_t doc;
  uint32_t band;
};

// One bucket of two or more documents as its owner sends it to rank 0: the documents in
// order and, for each k >= 1, whether (first, k) and (k-1, k) pass the threshold.
struct DistBucket {
  uint32_t band;
  uint64_t hash;
  std::vector<uint32_t> docs;
  std::vector<uint8_t> ok;  // bit 0: (docs[0], docs[k]); bit 1: (docs[k-1], docs[k])
};

void DistPutBucket(const DistBucket& b, std::string* s) {
  const uint32_t n = static_cast<uint32_t>(b.docs.size());
  s->append(reinterpret_cast<const char*>(&b.band), 4);
  s->append(reinterpret_cast<const char*>(&b.hash), 8);
  s->append(reinterpret_cast<const char*>(&n), 4);
  s->append(reinterpret_cast<const char*>(b.docs.data()), 4 * n);
  s->append(reinterpret_cast<const char*>(b.ok.data()), n);
}

absl::Status DistGetBuckets(const std::string& s, std::vector<DistBucket>* out) {
  for (size_t p = 0; p < s.size();) {
    if (s.size() - p < 16) return absl::InternalError("truncated bucket list");
    DistBucket b;
    uint32_t n = 0;
    std::memcpy(&b.band, s.data() + p, 4);
    std::memcpy(&b.hash, s.data() + p + 4, 8);
    std::memcpy(&n, s.data() + p + 12, 4);
    p += 16;
    if (s.size() - p < 5ull * n) return absl::InternalError("truncated bucket list");
    b.docs.resize(n);
    b.ok.resize(n);
    std::memcpy(b.docs.data(), s.data() + p, 4ull * n);
    std::memcpy(b.ok.data(), s.data() + p + 4ull * n, n);
    p += 5ull * n;
    out->push_back(std::move(b));
  }
  return absl::OkStatus();
}

// Sends the band hashes of the indexed documents to the buckets' owners; each owner fetches
// the fingerprints of documents in buckets of two or more from the ranks that hold them,
// verifies, and returns its buckets serialised (for rank 0).
absl::StatusOr<std::string> DistOwnBuckets(const ScanShare& share,
                                           const std::vector<uint8_t>& index, uint32_t first_gid,
                                           const std::vector<uint64_t>& starts,
                                           const ScanOptions& opt, comm::Communicator* comm,
                                           uint64_t* sent) {
  const int world = comm->world_size();
  const int perms = opt.bands * opt.rows;
  std::string bytes;
  // One band at a time, as the single scan: 16 bytes per document of a share in flight.
  std::vector<uint64_t> hashes;
  for (int band = 0; band < opt.bands; ++band) {
    std::vector<std::vector<DistBandRecord>> out(world);
    constexpr uint64_t kDocsPerRead = 1 << 16;
    for (uint64_t i0 = 0; i0 < index.size(); i0 += kDocsPerRead) {
      const size_t m = static_cast<size_t>(std::min<uint64_t>(kDocsPerRead, index.size() - i0));
      hashes.resize(m);
      TS_RETURN_IF_ERROR(share.band_files[band]->ReadAt(i0 * 8, hashes.data(), m * 8));
      for (size_t k = 0; k < m; ++k) {
        if (!index[i0 + k]) continue;
        const uint64_t h = hashes[k];
        out[DistBucketOwner(band, h, world)].push_back(
            {h, first_gid + static_cast<uint32_t>(i0 + k), static_cast<uint32_t>(band)});
      }
    }
    std::vector<std::vector<DistBandRecord>> in;
    TS_RETURN_IF_ERROR(AllToAllRecords(comm, out, &in, sent));
    out = {};
    std::vector<DistBandRecord> recs;
    for (auto& from : in) {
      recs.insert(recs.end(), from.begin(), from.end());
      from = {};
    }
    std::sort(recs.begin(), recs.end(), [](const DistBandRecord& x, const DistBandRecord& y) {
      if (x.band != y.band) return x.band < y.band;
      return x.hash != y.hash ? x.hash < y.hash : x.doc < y.doc;
    });
    // Documents of buckets with two or more: their fingerprints are fetched from their ranks.
    std::vector<std::vector<uint32_t>> want(world);
    {
      std::vector<uint32_t> need;
      for (size_t i = 0; i < recs.size();) {
        size_t j = i + 1;
        while (j < recs.size() && recs[j].band == recs[i].band && recs[j].hash == recs[i].hash) ++j;
        if (j - i >= 2) {
          for (size_t k = i; k < j; ++k) need.push_back(recs[k].doc);
        }
        i = j;
      }
      std::sort(need.begin(), need.end());
      need.erase(std::unique(need.begin(), need.end()), need.end());
      for (uint32_t g : need) {
        const int holder =
            static_cast<int>(std::upper_bound(starts.begin(), starts.end(), g) - starts.begin()) -
            1;
        want[holder].push_back(g);
      }
    }
    std::vector<std::vector<uint32_t>> asked;
    TS_RETURN_IF_ERROR(AllToAllRecords(comm, want, &asked, sent));
    std::vector<std::vector<uint16_t>> sigs_out(world);
    for (int s = 0; s < world; ++s) {
      sigs_out[s].resize(asked[s].size() * perms);
      for (size_t k = 0; k < asked[s].size(); ++k) {
        TS_RETURN_IF_ERROR(
            share.sig_file->ReadAt(static_cast<uint64_t>(asked[s][k] - first_gid) * perms * 2,
                                   &sigs_out[s][k * perms], perms * 2));
      }
    }
    asked = {};
    std::vector<std::vector<uint16_t>> sigs_in;
    TS_RETURN_IF_ERROR(AllToAllRecords(comm, sigs_out, &sigs_in, sent));
    sigs_out = {};
    absl::flat_hash_map<uint32_t, const uint16_t*> sig_of;
    for (int h = 0; h < world; ++h) {
      if (sigs_in[h].size() != want[h].size() * perms) {
        return absl::InternalError("fingerprint answers do not match the questions");
      }
      for (size_t k = 0; k < want[h].size(); ++k) sig_of[want[h][k]] = &sigs_in[h][k * perms];
    }
    // The single scan's rule (scan.cc): a pair is similar when at least ceil(t * P) of the
    // P fingerprints agree.
    const int need = static_cast<int>(std::ceil(opt.threshold * perms - 1e-9));
    auto similar = [&](uint32_t a, uint32_t b) {
      const uint16_t* sa = sig_of.at(a);
      const uint16_t* sb = sig_of.at(b);
      int agree = 0;
      for (int i = 0; i < perms; ++i) agree += sa[i] == sb[i];
      return agree >= need;
    };
    for (size_t i = 0; i < recs.size();) {
      size_t j = i + 1;
      while (j < recs.size() && recs[j].band == recs[i].band && recs[j].hash == recs[i].hash) ++j;
      if (j - i >= 2) {
        DistBucket b;
        b.band = recs[i].band;
        b.hash = recs[i].hash;
        for (size_t k = i; k < j; ++k) b.docs.push_back(recs[k].doc);
        b.ok.assign(b.docs.size(), 0);
        for (size_t k = 1; k < b.docs.size(); ++k) {
          b.ok[k] = (similar(b.docs[0], b.docs[k]) ? 1 : 0) |
                    (k >= 2 && similar(b.docs[k - 1], b.docs[k]) ? 2 : 0);
        }
        DistPutBucket(b, &bytes);
      }
      i = j;
    }
  }
  return bytes;
}

// Rank 0: the single scan's per-band pass (scan.cc, "near duplicates") over the gathered
// buckets, in its order: bands in order, buckets by hash, documents in order.
std::vector<std::pair<uint32_t, uint32_t>> DistReplayBuckets(std::vector<DistBucket> buckets,
                                                             ScanResult* res) {
  std::sort(buckets.begin(), buckets.end(), [](const DistBucket& x, const DistBucket& y) {
    return x.band != y.band ? x.band < y.band : x.hash < y.hash;
  });
  DistUnionFind uf;
  for (const DistBucket& b : buckets) {
    const uint32_t first = b.docs[0];
    for (size_t k = 1; k < b.docs.size(); ++k) {
      const uint32_t cur = b.docs[k];
      if (uf.Find(first) == uf.Find(cur)) continue;
      ++res->candidate_pairs;
      bool ok = b.ok[k] & 1;
      if (!ok && k >= 2 && uf.Find(b.docs[k - 1]) != uf.Find(cur)) {
        ++res->candidate_pairs;
        ok = b.ok[k] & 2;
      }
      if (ok) {
        ++res->verified_pairs;
        uf.Union(first, cur);
      }
    }
  }
  return uf.NonRoots();
}

}  // namespace

absl::StatusOr<std::vector<std::pair<uint32_t, uint32_t>>> DistResolveNear(
    ScanShare* share, const std::vector<uint8_t>& index, uint32_t first_gid,
    const std::vector<uint64_t>& starts, const ScanOptions& opt, comm::Communicator* comm,
    ScanResult* pairs, uint64_t* sent) {
  std::vector<std::pair<uint32_t, uint32_t>> near_roots;  // (document, root), sorted
  TS_ASSIGN_OR_RETURN(std::string mine_b,
                      DistOwnBuckets(*share, index, first_gid, starts, opt, comm, sent));
  share->band_files.clear();
  share->sig_file.reset();
  share->spill.reset();
  std::vector<std::string> all_b;
  TS_RETURN_IF_ERROR(GatherBytes(comm, mine_b, &all_b, sent));
  mine_b = {};
  std::string roots_bytes;
  if (comm->rank() == 0) {
    std::vector<DistBucket> buckets;
    for (const auto& s : all_b) TS_RETURN_IF_ERROR(DistGetBuckets(s, &buckets));
    all_b = {};
    near_roots = DistReplayBuckets(std::move(buckets), pairs);
    for (const auto& [doc, root] : near_roots) {
      roots_bytes.append(reinterpret_cast<const char*>(&doc), 4);
      roots_bytes.append(reinterpret_cast<const char*>(&root), 4);
    }
  }
  TS_RETURN_IF_ERROR(BroadcastBytes(comm, &roots_bytes, sent));
  near_roots.resize(roots_bytes.size() / 8);
  for (size_t k = 0; k < near_roots.size(); ++k) {
    std::memcpy(&near_roots[k].first, roots_bytes.data() + 8 * k, 4);
    std::memcpy(&near_roots[k].second, roots_bytes.data() + 8 * k + 4, 4);
  }
  return near_roots;
}

}  // namespace trainscope::data
