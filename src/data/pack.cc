// `data pack`: tokenise, place into fixed-length sequences, write Megatron .bin/.idx.
#include "trainscope/data/pack.h"

#include <unistd.h>

#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "data/spill.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/progress.h"
#include "trainscope/core/status.h"
#include "trainscope/core/table.h"
#include "trainscope/data/megatron.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::data {
namespace {

// Writes token runs at token positions of the .bin in the chosen item size.
class TokenFile {
 public:
  TokenFile(int fd, size_t item) : fd_(fd), item_(item) {}
  absl::Status WriteAt(uint64_t token_pos, const int32_t* ids, size_t n) {
    buf_.resize(n * item_);
    for (size_t i = 0; i < n; ++i) {
      if (item_ == 2) {
        const uint16_t v = static_cast<uint16_t>(ids[i]);
        std::memcpy(&buf_[i * 2], &v, 2);
      } else {
        std::memcpy(&buf_[i * 4], &ids[i], 4);
      }
    }
    const char* p = buf_.data();
    size_t left = buf_.size();
    off_t off = static_cast<off_t>(token_pos * item_);
    while (left > 0) {
      ssize_t w = ::pwrite(fd_, p, left, off);
      if (w <= 0) return absl::InternalError("write to .bin failed (disk full?)");
      p += w;
      off += w;
      left -= w;
    }
    return absl::OkStatus();
  }
  absl::Status Pad(uint64_t token_pos, size_t n, int32_t pad) {
    pad_.assign(n, pad);
    return WriteAt(token_pos, pad_.data(), n);
  }

 private:
  const int fd_;
  const size_t item_;
  std::string buf_;
  std::vector<int32_t> pad_;
};

}  // namespace

absl::StatusOr<PackReport> RunPack(const std::vector<InputFile>& inputs, const PackOptions& o) {
  if (o.tokenizer == nullptr) return absl::InvalidArgumentError("pack needs a tokenizer");
  if (o.seq_len <= 0 || o.seq_len > (1 << 30))
    return absl::InvalidArgumentError("--seq-len must be in 1..2^30");
  if (o.output_prefix.empty()) return absl::InvalidArgumentError("--output is required");
  if (auto st =
          CheckOutputsAgainstInputs({o.output_prefix + ".bin", o.output_prefix + ".idx"}, inputs);
      !st.ok()) {
    return absl::Status(
        st.code(), absl::StrCat(st.message(), " (-o ", o.output_prefix, " writes ", o.output_prefix,
                                ".bin and ", o.output_prefix, ".idx)"));
  }
  PackReport rep;
  rep.prefix = o.output_prefix;
  rep.tokenizer = o.tokenizer->name();
  rep.mode = o.mode == PackOptions::kConcat ? "concat" : "best-fit";
  rep.seq_len = o.seq_len;
  rep.vocab_size = o.tokenizer->vocab_size();
  const int32_t eos = o.tokenizer->eos_id();
  rep.pad_id = o.pad_id >= 0 ? o.pad_id : (eos >= 0 ? eos : 0);
  if (rep.pad_id >= rep.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pad-id ", rep.pad_id, " is outside the vocabulary (", rep.vocab_size, ")"));
  }
  const MegatronDType dtype = MegatronOptimalDType(rep.vocab_size);
  rep.dtype = dtype == MegatronDType::kUint16 ? "uint16" : "int32";
  const size_t item = MegatronItemSize(static_cast<uint8_t>(dtype));
  TS_ASSIGN_OR_RETURN(auto bin, OutputFile::Open(o.output_prefix + ".bin"));
  std::fflush(bin->file());
  TokenFile out(fileno(bin->file()), item);
  const uint64_t L = o.seq_len;
  const int32_t pad = static_cast<int32_t>(rep.pad_id);

  uint64_t total_in = 0;
  for (const auto& f : inputs) total_in += f.size_bytes;
  Progress progress("pack", total_in, true);
  std::vector<int32_t> ids, carry;  // carry: concat mode's incomplete sequence
  uint64_t stream_pos = 0;          // concat: tokens emitted so far
  // best-fit: open sequences by remaining room -> (sequence, fill)
  std::multimap<uint64_t, std::pair<uint64_t, uint64_t>> open;
  absl::Status status;
  ReaderOptions ro = o.reader;
  ro.tokenizer = o.tokenizer;

  auto close_bin = [&](uint64_t seq, uint64_t fill) {
    if (fill < L) {
      rep.pad_tokens += L - fill;
      status.Update(out.Pad(seq * L + fill, L - fill, pad));
    }
  };
  auto sink = [&](DocBatch&& b) {
    progress.Add(b.input_bytes);
    for (const DocRef& d : b.docs) {
      ids.clear();
      o.tokenizer->Encode(b.Text(d), &ids);
      if (eos >= 0) ids.push_back(eos);
      if (ids.empty()) continue;
      ++rep.docs;
      rep.tokens += ids.size();
      if (o.mode == PackOptions::kConcat) {
        if (stream_pos / L != (stream_pos + ids.size() - 1) / L) ++rep.split_docs;
        status.Update(out.WriteAt(stream_pos, ids.data(), ids.size()));
        stream_pos += ids.size();
        continue;
      }
      size_t off = 0;
      if (ids.size() > L) ++rep.split_docs;
      while (ids.size() - off >= L) {  // full pieces are sequences of their own
        status.Update(out.WriteAt(rep.sequences * L, ids.data() + off, L));
        ++rep.sequences;
        off += L;
      }
      const uint64_t rest = ids.size() - off;
      if (rest == 0) continue;
      auto it = open.lower_bound(rest);
      uint64_t seq, fill;
      if (it == open.end()) {
        seq = rep.sequences++;
        fill = 0;
      } else {
        seq = it->second.first;
        fill = it->second.second;
        open.erase(it);
      }
      status.Update(out.WriteAt(seq * L + fill, ids.data() + off, rest));
      fill += rest;
      if (fill < L) open.emplace(L - fill, std::make_pair(seq, fill));
      if (open.size() > o.max_open_bins) {  // close the fullest open sequence
        auto full = open.begin();
        close_bin(full->second.first, full->second.second);
        open.erase(full);
      }
    }
    return status.ok();
  };
  TS_RETURN_IF_ERROR(ReadCorpus(inputs, ro, sink, &rep.bad));
  TS_RETURN_IF_ERROR(status);
  if (o.mode == PackOptions::kConcat) {
    rep.sequences = (stream_pos + L - 1) / L;
    if (stream_pos % L) close_bin(stream_pos / L, stream_pos % L);
  } else {
    for (const auto& [room, sf] : open) close_bin(sf.first, sf.second);
  }
  TS_RETURN_IF_ERROR(status);
  TS_RETURN_IF_ERROR(bin->Commit());
  std::vector<int32_t> lengths(rep.sequences, static_cast<int32_t>(L));
  std::vector<int64_t> doc_idx(rep.sequences + 1);
  for (uint64_t i = 0; i <= rep.sequences; ++i) doc_idx[i] = i;
  TS_RETURN_IF_ERROR(WriteMegatronIndex(o.output_prefix, dtype, lengths, doc_idx));
  rep.pad_fraction = rep.sequences ? static_cast<double>(rep.pad_tokens) / (rep.sequences * L) : 0;
  return rep;
}

nlohmann::json PackReportToJson(const PackReport& r) {
  return {{"format", formats::kDataPack},
          {"version", 1},
          {"prefix", r.prefix},
          {"bin", r.prefix + ".bin"},
          {"idx", r.prefix + ".idx"},
          {"tokenizer", r.tokenizer},
          {"mode", r.mode},
          {"dtype", r.dtype},
          {"seq_len", r.seq_len},
          {"vocab_size", r.vocab_size},
          {"pad_id", r.pad_id},
          {"docs", r.docs},
          {"tokens", r.tokens},
          {"sequences", r.sequences},
          {"pad_tokens", r.pad_tokens},
          {"pad_fraction", r.pad_fraction},
          {"split_docs", r.split_docs},
          {"truncated_tokens", r.truncated_tokens},
          {"bad_records", r.bad.ToJson()}};
}

std::string PackReportToText(const PackReport& r) {
  Table t({"measure", "value"});
  t.AddRow({"documents", FormatCount(r.docs)});
  t.AddRow({"tokens (" + r.tokenizer + ", with end-of-document)", FormatCount(r.tokens)});
  t.AddRow({absl::StrCat("sequences of ", r.seq_len, " (", r.mode, ")"), FormatCount(r.sequences)});
  t.AddRow({"padding", absl::StrCat(FormatCount(r.pad_tokens), " tokens (",
                                    FormatDouble(100 * r.pad_fraction, 2), "%)")});
  t.AddRow({"documents split across sequences", FormatCount(r.split_docs)});
  t.AddRow({"tokens truncated", FormatCount(r.truncated_tokens)});
  t.AddRow({"dtype", r.dtype});
  t.AddRow({"bad records skipped", FormatCount(r.bad.total())});
  return t.Render(80) +
         absl::StrCat("wrote ", r.prefix, ".bin and ", r.prefix, ".idx (Megatron MMIDIDX v1)\n");
}

}  // namespace trainscope::data
