// data compare: the distances on known inputs, and the two coverage cases of issue 19 on real
// text of this machine (Debian's license texts and the Python standard library's sources).
#include "trainscope/data/compare.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace trainscope::data {
namespace {

namespace fs = std::filesystem;

TEST(CompareTest, PsiAndKs) {
  std::vector<double> a, b, shifted;
  for (int i = 0; i < 1000; ++i) {
    a.push_back(i % 100);
    b.push_back((i * 7) % 100);
    shifted.push_back(50 + i % 100);
  }
  EXPECT_NEAR(PopulationStabilityIndex(a, b), 0.0, 1e-9);
  EXPECT_GT(PopulationStabilityIndex(a, shifted), 0.25);
  EXPECT_NEAR(KsStatistic(a, b), 0.0, 1e-9);
  EXPECT_NEAR(KsStatistic(a, shifted), 0.5, 1e-9);
  EXPECT_DOUBLE_EQ(KsStatistic({1, 2, 3}, {10, 11}), 1.0);
}

// Blank-line paragraphs of at least 40 bytes.
std::vector<std::string> Paragraphs(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find("\n\n", pos);
    if (end == std::string::npos) end = text.size();
    std::string p = text.substr(pos, end - pos);
    p.erase(0, p.find_first_not_of(" \n"));
    if (p.size() >= 40) out.push_back(p);
    pos = end + 2;
  }
  return out;
}

void WriteJsonl(const fs::path& path, const std::vector<std::string>& docs) {
  std::ofstream out(path);
  for (const std::string& d : docs) out << nlohmann::json({{"text", d}}).dump() << "\n";
}

class CompareRealText : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ts_compare_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::vector<fs::path> licenses, python;
    for (const auto& e : fs::directory_iterator("/usr/share/common-licenses")) {
      if (e.is_regular_file() && !e.is_symlink()) licenses.push_back(e.path());
    }
    for (const char* d : {"/usr/lib/python3.11", "/usr/lib/python3.12", "/usr/lib/python3.13"}) {
      if (!fs::is_directory(d)) continue;
      for (const auto& e : fs::directory_iterator(d)) {
        if (e.is_regular_file() && e.path().extension() == ".py") python.push_back(e.path());
      }
      break;
    }
    std::sort(licenses.begin(), licenses.end());
    std::sort(python.begin(), python.end());
    for (const fs::path& p : licenses) {
      for (std::string& s : Paragraphs(p)) legal_.push_back(std::move(s));
    }
    std::vector<std::string> code;
    for (const fs::path& p : python) {
      for (std::string& s : Paragraphs(p)) code.push_back(std::move(s));
      if (code.size() >= 6000) break;  // ~6,700 documents in all: 0.2 s to compare
    }
    whole_ = legal_;
    whole_.insert(whole_.end(), code.begin(), code.end());
    std::mt19937 rng(1);
    std::shuffle(whole_.begin(), whole_.end(), rng);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::vector<std::string> legal_, whole_;
};

// A calibration set drawn from one topic (license texts only) does not cover a corpus that
// is mostly source code and its documentation.
TEST_F(CompareRealText, OneTopicSliceDoesNotCoverTheWhole) {
  ASSERT_GE(legal_.size(), 300u) << "/usr/share/common-licenses holds too little text";
  ASSERT_GE(whole_.size(), legal_.size() + 6000) << "no Python standard library sources found";
  WriteJsonl(dir_ / "whole.jsonl", whole_);
  WriteJsonl(dir_ / "legal.jsonl", legal_);
  CompareOptions o;
  absl::StatusOr<CompareReport> r =
      CompareCorpora({(dir_ / "whole.jsonl").string()}, {(dir_ / "legal.jsonl").string()}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->covers);
  EXPECT_LT(r->word_coverage, o.thresholds.min_word_coverage);
  EXPECT_LT(r->bigram_coverage, o.thresholds.min_bigram_coverage);
  ASSERT_FALSE(r->least_covered.empty());
  EXPECT_LT(r->least_covered[0].word_coverage, 0.5);
  EXPECT_EQ(r->reference.docs, whole_.size());
}

// A random half of the same corpus covers the other half.
TEST_F(CompareRealText, RandomHalfCoversTheOtherHalf) {
  ASSERT_GE(whole_.size(), 6000u);
  const size_t half = whole_.size() / 2;
  WriteJsonl(dir_ / "a.jsonl", {whole_.begin(), whole_.begin() + half});
  WriteJsonl(dir_ / "b.jsonl", {whole_.begin() + half, whole_.end()});
  absl::StatusOr<CompareReport> r =
      CompareCorpora({(dir_ / "a.jsonl").string()}, {(dir_ / "b.jsonl").string()}, {});
  ASSERT_TRUE(r.ok()) << r.status();
  std::string why;
  for (const std::string& s : r->reasons) why += s + "\n";
  EXPECT_TRUE(r->covers) << why;
  for (const FeatureShift& f : r->features) EXPECT_LT(f.psi, 0.1) << f.name;
}

TEST(CompareTest, EmptySideIsAnError) {
  fs::path dir = fs::temp_directory_path() / ("ts_compare_empty_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  WriteJsonl(dir / "one.jsonl", {"some text of a document"});
  std::ofstream(dir / "empty.jsonl").close();
  absl::StatusOr<CompareReport> r =
      CompareCorpora({(dir / "one.jsonl").string()}, {(dir / "empty.jsonl").string()}, {});
  EXPECT_FALSE(r.ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trainscope::data
