// Padding waste of four ways of turning documents into fixed-length sequences
// (../shared/reference/data.md §6.2, §9.6). Lengths include the end-of-document token.
#include <algorithm>
#include <map>

#include "trainscope/data/scan.h"

namespace trainscope::data {

std::vector<PaddingStrategy> PaddingWaste(const std::vector<uint32_t>& tokens, int64_t seq_len,
                                          int64_t batch_size) {
  std::vector<PaddingStrategy> out;
  if (seq_len <= 0 || tokens.empty()) return out;
  const uint64_t L = seq_len;
  const size_t n = tokens.size();
  const size_t B = batch_size > 0 ? batch_size : 1;
  uint64_t total = 0;
  for (uint32_t t : tokens) total += t;

  {  // pad (or truncate) every document to L
    PaddingStrategy s{"pad_to_max"};
    uint64_t real = 0;
    for (uint32_t t : tokens) {
      real += std::min<uint64_t>(t, L);
      s.truncated_tokens += t > L ? t - L : 0;
    }
    s.sequences = n;
    s.pad_fraction = 1.0 - static_cast<double>(real) / (static_cast<double>(n) * L);
    out.push_back(s);
  }
  {  // pad to the longest document of each batch of B (capped at L)
    PaddingStrategy s{"pad_per_batch"};
    uint64_t real = 0, slots = 0;
    for (size_t i = 0; i < n; i += B) {
      const size_t e = std::min(n, i + B);
      uint64_t width = 0;
      for (size_t k = i; k < e; ++k) width = std::max<uint64_t>(width, tokens[k]);
      width = std::min(width, L);
      for (size_t k = i; k < e; ++k) {
        real += std::min<uint64_t>(tokens[k], width);
        s.truncated_tokens += tokens[k] > width ? tokens[k] - width : 0;
      }
      slots += (e - i) * width;
    }
    s.sequences = n;
    s.pad_fraction = slots ? 1.0 - static_cast<double>(real) / slots : 0;
    out.push_back(s);
  }
  {  // concatenate everything and cut every L tokens
    PaddingStrategy s{"concat_chunk"};
    s.sequences = (total + L - 1) / L;
    s.pad_fraction = s.sequences ? 1.0 - static_cast<double>(total) / (s.sequences * L) : 0;
    uint64_t pos = 0;
    for (uint32_t t : tokens) {
      if (t > 0 && pos / L != (pos + t - 1) / L) ++s.split_documents;
      pos += t;
    }
    out.push_back(s);
  }
  {  // best-fit decreasing: documents over L are cut into L-sized pieces first
    PaddingStrategy s{"best_fit"};
    std::vector<uint32_t> rest;
    std::vector<uint64_t> count(L, 0);  // remainders are < L: a counting sort
    uint64_t full = 0;
    for (uint32_t t : tokens) {
      if (t > L) ++s.split_documents;
      full += t / L;
      if (t % L) ++count[t % L];
    }
    rest.reserve(tokens.size());
    for (uint64_t v = L; v-- > 1;) rest.insert(rest.end(), count[v], static_cast<uint32_t>(v));
    std::map<uint64_t, uint64_t> free_bins;  // remaining capacity -> bins
    uint64_t bins = 0;
    for (uint32_t t : rest) {
      auto it = free_bins.lower_bound(t);
      uint64_t cap;
      if (it == free_bins.end()) {
        ++bins;
        cap = L;
      } else {
        cap = it->first;
        if (--it->second == 0) free_bins.erase(it);
      }
      if (cap - t > 0) ++free_bins[cap - t];
    }
    s.sequences = full + bins;
    s.pad_fraction = s.sequences ? 1.0 - static_cast<double>(total) / (s.sequences * L) : 0;
    out.push_back(s);
  }
  return out;
}

}  // namespace trainscope::data
