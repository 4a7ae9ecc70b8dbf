// Corpus loading, packing, the seeded shuffle and the prefetching batch loader.
#include "trainscope/train/data.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"
#include "trainscope/core/progress.h"
#include "trainscope/core/status.h"

namespace trainscope::train {
namespace {

namespace fs = std::filesystem;

bool IsJsonl(const std::string& path, const std::string& format) {
  if (format == "jsonl") return true;
  if (format == "text") return false;
  auto ends = [&](const char* suffix) {
    size_t n = std::char_traits<char>::length(suffix);
    return path.size() >= n && path.compare(path.size() - n, n, suffix) == 0;
  };
  return ends(".jsonl") || ends(".json") || ends(".ndjson");
}

// Expands directories into their regular files (sorted, symlinks skipped).
absl::StatusOr<std::vector<std::string>> ExpandPaths(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    fs::file_status st = fs::status(p, ec);
    if (ec || !fs::exists(st)) {
      return absl::NotFoundError(absl::StrCat(p, ": corpus path does not exist or is unreadable"));
    }
    if (fs::is_directory(st)) {
      std::vector<std::string> inner;
      for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->is_symlink() || !it->is_regular_file()) continue;
        inner.push_back(it->path().string());
      }
      if (ec)
        return absl::NotFoundError(absl::StrCat(p, ": cannot list directory: ", ec.message()));
      if (inner.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(p, ": empty corpus (no regular files)"));
      }
      std::sort(inner.begin(), inner.end());
      files.insert(files.end(), inner.begin(), inner.end());
    } else {
      files.push_back(p);
    }
  }
  return files;
}

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
                                        int seq_len) {
  PackedCorpus out;
  out.seq_len = seq_len;
  CorpusStats& st = out.stats;
  TS_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandPaths(config.corpus));
  uint64_t total_bytes = 0;
  for (const std::string& f : files) {
    std::error_code ec;
    uintmax_t n = fs::file_size(f, ec);
    if (!ec) total_bytes += n;
  }
  Progress progress("train: reading corpus", total_bytes, /*unit_bytes=*/true);
  const int32_t eos = tok.eos_id();
  auto add_document = [&](std::string_view text) {
    if (text.empty()) {
      ++st.empty_documents;
      return;
    }
    size_t before = out.tokens.size();
    tok.Encode(text, &out.tokens);
    if (eos >= 0) out.tokens.push_back(eos);
    ++st.documents;
    st.bytes += static_cast<int64_t>(text.size());
    st.tokens += static_cast<int64_t>(out.tokens.size() - before);
  };
  for (const std::string& f : files) {
    auto data = Os::Default()->ReadFile(f);
    if (!data.ok()) {
      return absl::NotFoundError(
          absl::StrCat(f, ": cannot read corpus file (", data.status().message(), ")"));
    }
    ++st.files;
    if (!IsJsonl(f, config.format)) {
      add_document(*data);
    } else {
      // One JSON object per line; malformed lines are counted, not fatal.
      const std::string& s = *data;
      size_t pos = 0;
      int64_t line_no = 0;
      while (pos < s.size()) {
        size_t nl = s.find('\n', pos);
        if (nl == std::string::npos) nl = s.size();
        std::string_view line(s.data() + pos, nl - pos);
        ++line_no;
        pos = nl + 1;
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.is_object()) {
          if (st.first_bad_record.empty())
            st.first_bad_record = absl::StrCat(f, ":", line_no, ": not a JSON object");
          ++st.bad_records;
          continue;
        }
        auto it = j.find(config.text_field);
        if (it == j.end() || !it->is_string()) {
          if (st.first_bad_record.empty())
            st.first_bad_record =
                absl::StrCat(f, ":", line_no, ": no string field \"", config.text_field, "\"");
          ++st.missing_text_field;
          continue;
        }
        add_document(it->get_ref<const std::string&>());
      }
    }
    progress.Add(data->size());
  }
  const std::string names = files.size() == 1
                                ? files[0]
                                : absl::StrCat(files[0], " and ", files.size() - 1, " more files");
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
