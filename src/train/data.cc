// Corpus loading, packing, the seeded shuffle and the prefetching batch loader.
//
// The corpus is read through the data module (data/reader.h, data/megatron.h), so the
// trainer accepts exactly the inputs `trainscope data scan` does and counts bad records the
// same way; only the document boundaries are the trainer's own (a text file is one
// document, not one per line) and Megatron datasets are taken as token ids, never
// detokenized and retokenized.
#include "trainscope/train/data.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/progress.h"
#include "trainscope/core/status.h"
#include "trainscope/data/megatron.h"
#include "trainscope/data/reader.h"

namespace trainscope::train {
namespace {

namespace fs = std::filesystem;

data::InputFormat CorpusInputFormat(const std::string& format) {
  if (format == "jsonl") return data::InputFormat::kJsonl;
  if (format == "text") return data::InputFormat::kText;
  return data::InputFormat::kAuto;
}

// True when `in` was found under a directory argument through a symbolic link (the file
// itself or a directory on the way): an alias of a file the walk may read anyway, which the
// trainer would train on twice. Files and globs named in the config are kept.
bool CorpusReachedThroughLink(const data::InputFile& in) {
  if (in.root.empty()) return false;
  const fs::path root(in.root);
  const fs::path rel = fs::path(in.path).lexically_relative(root);
  fs::path p = root;
  for (const fs::path& part : rel) {
    p /= part;
    std::error_code ec;
    if (fs::is_symlink(fs::symlink_status(p, ec))) return true;
  }
  return false;
}

// All paths are expanded at once, as `data scan` does (a dataset named by both its .bin and
// its .idx is read once). When that fails, the paths are expanded one by one again to name
// the one at fault in the trainer's words.
absl::StatusOr<std::vector<data::InputFile>> CorpusExpand(const DataConfig& config) {
  const data::InputFormat format = CorpusInputFormat(config.format);
  auto inputs = data::ExpandInputs(config.corpus, format);
  if (inputs.ok()) {
    inputs->erase(std::remove_if(inputs->begin(), inputs->end(), CorpusReachedThroughLink),
                  inputs->end());
    if (inputs->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          config.corpus[0], ": empty corpus (only symbolic links, which are skipped)"));
    }
    return inputs;
  }
  for (const std::string& p : config.corpus) {
    auto one = data::ExpandInputs({p}, format);
    if (one.ok()) continue;
    absl::string_view why = one.status().message();
    if (one.status().code() == absl::StatusCode::kNotFound) {
      absl::ConsumePrefix(&why, p + ": ");
      return absl::NotFoundError(
          absl::StrCat(p, ": corpus path does not exist or is unreadable (", why, ")"));
    }
    if (why == "no input files") {
      return absl::InvalidArgumentError(
          absl::StrCat(p, ": empty corpus (no files; hidden files are skipped)"));
    }
    return one.status();
  }
  return inputs.status();
}

// Appends documents of the inputs to one token stream, with the stats.
class CorpusBuilder {
 public:
  CorpusBuilder(const DataConfig& config, const tokenizer::Tokenizer& tok, PackedCorpus* out,
                Progress* progress, bool keep_ends)
      : config_(config), tok_(tok), out_(out), progress_(progress), keep_ends_(keep_ends) {}

  absl::Status Read(const data::InputFile& in) {
    ++out_->stats.files;
    switch (in.format) {
      case data::InputFormat::kJsonl:
        return ReadJsonl(in);
      case data::InputFormat::kMegatron:
        return ReadMegatron(in);
      default:
        return ReadText(in);
    }
  }

  // Fills the bad-record fields of the stats from what the readers counted.
  void Finish() {
    CorpusStats& st = out_->stats;
    st.missing_text_field = 0;
    for (const auto& [kind, n] : bad_.counts()) {
      if (kind == "missing_text_field" || kind == "text_not_string") st.missing_text_field += n;
    }
    st.bad_records = static_cast<int64_t>(bad_.total()) - st.missing_text_field;
    st.first_bad_record = bad_.examples().empty() ? std::string() : bad_.examples().front();
  }

 private:
  // Tokenizes one document and appends it with the end-of-document id.
  void AddDocument(std::string_view text) {
    CorpusStats& st = out_->stats;
    if (text.empty()) {
      ++st.empty_documents;
      return;
    }
    const size_t before = out_->tokens.size();
    tok_.Encode(text, &out_->tokens);
    if (tok_.eos_id() >= 0) out_->tokens.push_back(tok_.eos_id());
    ++st.documents;
    st.bytes += static_cast<int64_t>(text.size());
    st.tokens += static_cast<int64_t>(out_->tokens.size() - before);
    EndDocument();
  }

  void EndDocument() {
    if (keep_ends_) out_->document_ends.push_back(static_cast<int64_t>(out_->tokens.size()));
  }

  // A text file is one document. A damaged compressed file is a bad record: its readable
  // part would be a truncated document.
  absl::Status ReadText(const data::InputFile& in) {
    absl::Status st = data::ReadWholeInput(in, &text_, [&](uint64_t n) { progress_->Add(n); });
    if (st.code() == absl::StatusCode::kDataLoss) {
      bad_.Add(absl::StrContains(st.message(), "truncated") ? "truncated_stream" : "corrupt_stream",
               in.path, 0, std::string(st.message()));
      return absl::OkStatus();
    }
    TS_RETURN_IF_ERROR(st);
    AddDocument(text_);
    text_ = std::string();  // a whole file: do not keep its memory for the next one
    return absl::OkStatus();
  }

  absl::Status ReadJsonl(const data::InputFile& in) {
    data::ReaderOptions ro;
    ro.text_field = config_.text_field;
    ro.id_field.clear();  // ids are not used
    ro.raw_jsonl_blocks = false;
    return data::ReadCorpus(
        {in}, ro,
        [&](data::DocBatch&& b) {
          progress_->Add(b.input_bytes);
          for (const data::DocRef& d : b.docs) AddDocument(b.Text(d));
          return true;
        },
        &bad_);
  }

  // Token ids as stored, checked against the tokenizer's vocabulary (a dataset made with
  // another tokenizer would index past the embedding).
  absl::Status ReadMegatron(const data::InputFile& in) {
    const std::string prefix = data::MegatronPrefix(in.path);
    const std::string bin_path = prefix + ".bin";
    TS_ASSIGN_OR_RETURN(data::MegatronIndex index, data::ReadMegatronIndex(prefix));
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> bin(std::fopen(bin_path.c_str(), "rb"),
                                                        &std::fclose);
    if (bin == nullptr) return absl::NotFoundError(absl::StrCat(bin_path, ": cannot open"));
    CorpusStats& st = out_->stats;
    const int64_t vocab = tok_.vocab_size();
    const size_t item = data::MegatronItemSize(index.dtype_code);
    std::vector<int64_t> seq;
    for (size_t d = 0; d < index.num_documents(); ++d) {
      const size_t before = out_->tokens.size();
      for (int64_t s = index.doc_idx[d]; s < index.doc_idx[d + 1]; ++s) {
        absl::Status rs = data::ReadMegatronSequence(bin.get(), index, s, &seq);
        if (!rs.ok()) return absl::Status(rs.code(), absl::StrCat(bin_path, ": ", rs.message()));
        for (size_t k = 0; k < seq.size(); ++k) {
          if (seq[k] < 0 || seq[k] >= vocab) {
            return absl::InvalidArgumentError(absl::StrCat(
                bin_path, ": document ", d, " (sequence ", s, ", token ", k, "): token id ", seq[k],
                " is outside the vocabulary of the tokenizer ", tok_.name(), " (", vocab,
                " ids); was the dataset made with another tokenizer? (key \"data.tokenizer\")"));
          }
          out_->tokens.push_back(static_cast<int32_t>(seq[k]));
        }
        progress_->Add(seq.size() * item);
      }
      const size_t n = out_->tokens.size() - before;
      if (n == 0) {
        ++st.empty_documents;
        continue;
      }
      ++st.documents;
      st.tokens += static_cast<int64_t>(n);
      EndDocument();
    }
    return absl::OkStatus();
  }

  const DataConfig& config_;
  const tokenizer::Tokenizer& tok_;
  PackedCorpus* const out_;
  Progress* const progress_;
  const bool keep_ends_;  // record PackedCorpus::document_ends
  data::BadRecords bad_;
  std::string text_;  // a text file being read
};

}  // namespace

nlohmann::json CorpusStatsToJson(const CorpusStats& s) {
  return {{"files", s.files},
          {"documents", s.documents},
          {"bytes", s.bytes},
          {"tokens", s.tokens},
          {"sequences", s.sequences},
          {"bad_records", s.bad_records},
          {"missing_text_field", s.missing_text_field},
          {"empty_documents", s.empty_documents},
          {"first_bad_record", s.first_bad_record}};
}

absl::StatusOr<PackedCorpus> LoadCorpus(const DataConfig& config, const tokenizer::Tokenizer& tok,
                                        int seq_len, bool keep_document_ends) {
  PackedCorpus out;
  out.seq_len = seq_len;
  CorpusStats& st = out.stats;
  TS_ASSIGN_OR_RETURN(std::vector<data::InputFile> inputs, CorpusExpand(config));
  uint64_t total_bytes = 0;
  for (const data::InputFile& in : inputs) total_bytes += in.size_bytes;
  Progress progress("train: reading corpus", total_bytes, /*unit_bytes=*/true);
  CorpusBuilder builder(config, tok, &out, &progress, keep_document_ends);
  for (const data::InputFile& in : inputs) TS_RETURN_IF_ERROR(builder.Read(in));
  builder.Finish();
  const std::string names =
      inputs.size() == 1 ? inputs[0].path
                         : absl::StrCat(inputs[0].path, " and ", inputs.size() - 1, " more files");
  if (st.documents == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(names, ": empty corpus (no text",
                     st.bad_records + st.missing_text_field > 0
                         ? absl::StrCat("; first bad record: ", st.first_bad_record)
                         : std::string(),
                     ")"));
  }
  if (static_cast<int64_t>(out.tokens.size()) < seq_len + 1) {
    return absl::InvalidArgumentError(absl::StrCat(names, ": corpus too small: ", out.tokens.size(),
                                                   " tokens, need at least ", seq_len + 1,
                                                   " (model.seq_len + 1)"));
  }
  out.num_sequences = (static_cast<int64_t>(out.tokens.size()) - 1) / seq_len;
  st.sequences = out.num_sequences;
  return out;
}

std::string DataOrderHash(const PackedCorpus& corpus, uint64_t seed) {
  // Fixed-width little-endian fields (every supported platform is little-endian), tagged
  // with a version so a later change of the recipe cannot collide with this one.
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  auto add_u64 = [&](uint64_t v) { XXH3_64bits_update(state, &v, sizeof(v)); };
  static constexpr char kTag[] = "trainscope.data_order.v1";
  XXH3_64bits_update(state, kTag, sizeof(kTag) - 1);
  add_u64(corpus.tokens.size());
  XXH3_64bits_update(state, corpus.tokens.data(), corpus.tokens.size() * sizeof(int32_t));
  add_u64(static_cast<uint64_t>(corpus.seq_len));
  add_u64(static_cast<uint64_t>(corpus.num_sequences));
  add_u64(seed);
  const std::vector<int64_t> order = ShuffledOrder(corpus.num_sequences, seed, 0);
  XXH3_64bits_update(state, order.data(), order.size() * sizeof(int64_t));
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::vector<int64_t> ShuffledOrder(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  uint64_t state = seed ^ (static_cast<uint64_t>(epoch) * 0x9E3779B97F4A7C15ULL);
  // Fisher-Yates from the end; the modulo bias is irrelevant at these sizes and keeps the
  // peer implementation trivial.
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(SplitMix64(&state) % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

std::vector<int64_t> SequencesForMicroStep(int64_t n, const LoaderOptions& o, int64_t index) {
  std::vector<int64_t> ids(o.micro_batch);
  int64_t base = (index * o.world_size + o.rank) * o.micro_batch;
  int64_t cached_epoch = -1;
  std::vector<int64_t> order;
  for (int j = 0; j < o.micro_batch; ++j) {
    int64_t pos = base + j;
    int64_t epoch = pos / n;
    if (epoch != cached_epoch) {
      order = ShuffledOrder(n, o.seed, epoch);
      cached_epoch = epoch;
    }
    ids[j] = order[pos % n];
  }
  return ids;
}

BatchLoader::BatchLoader(const PackedCorpus* corpus, LoaderOptions options)
    : corpus_(corpus), options_(options) {
  next_to_build_ = next_to_consume_ = options_.start_index;
  for (int i = 0; i < options_.num_workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

std::shared_ptr<const std::vector<int64_t>> BatchLoader::Order(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(order_mu_);
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return it->second;
  auto order = std::make_shared<const std::vector<int64_t>>(
      ShuffledOrder(corpus_->num_sequences, options_.seed, epoch));
  orders_[epoch] = order;
  while (orders_.size() > 3) orders_.erase(orders_.begin());  // workers only look ahead a little
  return order;
}

Batch BatchLoader::Build(int64_t index) const {
  const int64_t n = corpus_->num_sequences;
  const int t = corpus_->seq_len;
  Batch b;
  b.index = index;
  b.rows = options_.micro_batch;
  b.cols = t;
  b.inputs.resize(static_cast<size_t>(b.rows) * t);
  b.targets.resize(static_cast<size_t>(b.rows) * t);
  b.sequence_ids.resize(b.rows);
  int64_t base = (index * options_.world_size + options_.rank) * options_.micro_batch;
  for (int r = 0; r < b.rows; ++r) {
    int64_t pos = base + r;
    int64_t seq = (*Order(pos / n))[pos % n];
    b.sequence_ids[r] = seq;
    const int32_t* src = corpus_->tokens.data() + seq * t;
    int64_t* in = b.inputs.data() + static_cast<size_t>(r) * t;
    int64_t* tg = b.targets.data() + static_cast<size_t>(r) * t;
    for (int i = 0; i < t; ++i) {
      in[i] = src[i];
      tg[i] = src[i + 1];
    }
  }
  if (options_.worker_delay_ms > 0) {
    std::this_thread::sleep_for(
        std::chrono::duration<double, std::milli>(options_.worker_delay_ms));
  }
  return b;
}

void BatchLoader::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || next_to_build_ < next_to_consume_ + options_.prefetch; });
    if (stop_) return;
    int64_t index = next_to_build_++;
    lock.unlock();
    Batch b;
    try {
      b = Build(index);
    } catch (...) {
      lock.lock();
      if (!error_) error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    lock.lock();
    ready_.emplace(index, std::move(b));
    cv_.notify_all();
  }
}

Batch BatchLoader::Next() {
  if (workers_.empty()) return Build(next_to_consume_++);
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t want = next_to_consume_;
  cv_.wait(lock, [&] { return ready_.count(want) > 0 || error_ != nullptr; });
  if (ready_.count(want) == 0) std::rethrow_exception(error_);
  Batch b = std::move(ready_[want]);
  ready_.erase(want);
  ++next_to_consume_;
  cv_.notify_all();
  return b;
}

}  // namespace trainscope::train
