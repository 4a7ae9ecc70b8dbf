// Unit tests of the compare module: msprobe's metrics on tensors whose results can be worked
// out by hand, the statistics columns and rules, the dump.json reader (cut files, NaN), the
// mapping file and the first divergence.
#include "trainscope/compare/compare.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "compare/internal.h"
#include "core/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainscope/compare/runs.h"

namespace trainscope::compare {
namespace {

TensorData T(std::vector<double> v, std::vector<int64_t> shape, std::string dtype = "float64") {
  return TensorData{std::move(v), std::move(shape), std::move(dtype)};
}

TEST(CompareMetrics, IdenticalTensorsAgreeExactly) {
  double m[6];
  std::vector<std::string> msg;
  TensorMetrics(T({1, 2, 3, 4}, {4}), T({1, 2, 3, 4}, {4}), m, &msg);
  EXPECT_EQ(m[0], 1.0);  // cosine
  EXPECT_EQ(m[1], 0.0);  // EucDist
  EXPECT_EQ(m[2], 0.0);  // MaxAbsErr
  EXPECT_EQ(m[3], 0.0);  // MaxRelativeErr
  EXPECT_EQ(m[4], 1.0);
  EXPECT_EQ(m[5], 1.0);
  EXPECT_TRUE(msg.empty());
}

TEST(CompareMetrics, HandComputedPair) {
  // A = [1, 2], B = [2, 2]: cos = 6 / (sqrt(5) sqrt(8)), dist 1, max abs 1, relative errors
  // 0.5 and 0: max 0.5, one element of two under 0.001 and 0.005.
  double m[6];
  std::vector<std::string> msg;
  TensorMetrics(T({1, 2}, {2}), T({2, 2}, {2}), m, &msg);
  EXPECT_NEAR(m[0], std::round(6 / std::sqrt(40.0) * 1e12) / 1e12, 1e-15);
  EXPECT_DOUBLE_EQ(m[1], 1.0);
  EXPECT_DOUBLE_EQ(m[2], 1.0);
  EXPECT_DOUBLE_EQ(m[3], 0.5);
  EXPECT_DOUBLE_EQ(m[4], 0.5);
  EXPECT_DOUBLE_EQ(m[5], 0.5);
}

TEST(CompareMetrics, ZeroInBenchAddsEpsilon) {
  // B's 0 gets eps on both sides: (1e-3 + eps - eps) / eps; float32 arithmetic for float32.
  double m[6];
  std::vector<std::string> msg;
  TensorMetrics(T({0.5, 1}, {2}, "torch.float32"), T({0, 1}, {2}, "torch.float32"), m, &msg);
  const float eps = std::numeric_limits<float>::epsilon();
  const float expect = std::fabs(((0.5f + eps) - eps) / eps);
  EXPECT_NEAR(m[3], std::round(double(expect) * 1e12) / 1e12, 1e-3);
  EXPECT_DOUBLE_EQ(m[4], 0.5);
}

TEST(CompareMetrics, ZeroDimensionalTensorOnlyAbsoluteAndRelative) {
  double m[6];
  std::vector<std::string> msg;
  TensorMetrics(T({3}, {}), T({4}, {}), m, &msg);
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_TRUE(std::isnan(m[1]));
  EXPECT_DOUBLE_EQ(m[2], 1.0);
  EXPECT_DOUBLE_EQ(m[3], 0.25);
  EXPECT_TRUE(std::isnan(m[4]));
  ASSERT_FALSE(msg.empty());
  EXPECT_NE(msg[0].find("0-d tensor"), std::string::npos);
}

TEST(CompareMetrics, NanPositions) {
  double m[6];
  std::vector<std::string> msg;
  const double nan = std::nan("");
  TensorMetrics(T({nan, 1, 2}, {3}), T({nan, 1, 2}, {3}), m, &msg);  // same place: counts as 0
  EXPECT_EQ(m[2], 0.0);
  msg.clear();
  TensorMetrics(T({nan, 1, 2}, {3}), T({0, 1, 2}, {3}), m, &msg);  // one side only
  EXPECT_TRUE(std::isnan(m[2]));
  ASSERT_EQ(msg.size(), 1u);
  EXPECT_NE(msg[0].find("inf or nan"), std::string::npos);
}

TEST(CompareMetrics, AllZeroSideAndShapeMismatch) {
  double m[6];
  std::vector<std::string> msg;
  TensorMetrics(T({0, 0}, {2}), T({1, 1}, {2}), m, &msg);
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_NE(msg.back().find("Zero in npu"), std::string::npos);
  msg.clear();
  TensorMetrics(T({0, 0}, {2}), T({1, 1, 1}, {3}), m, &msg);
  EXPECT_NE(msg.back().find("Shape"), std::string::npos);
}

TEST(CompareFormat, PythonRepr) {
  EXPECT_EQ(PyFloat(1.0), "1.0");
  EXPECT_EQ(PyFloat(0.1), "0.1");
  EXPECT_EQ(PyFloat(1e-5), "1e-05");
  EXPECT_EQ(PyFloat(0.0001), "0.0001");
  EXPECT_EQ(PyFloat(-12.848326206207275), "-12.848326206207275");
  EXPECT_EQ(PyFloat(1e16), "1e+16");
  EXPECT_EQ(PyFloat(123456789012345.0), "123456789012345.0");
  EXPECT_EQ(PyFloat(HUGE_VAL), "inf");
}

constexpr char kDumpA[] = R"({"task": "statistics", "level": "L1", "framework": "pytorch",
 "dump_data_dir": null, "data": {
 "Functional.linear.0.forward": {"input_args": [
   {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 4], "Max": 1.0, "Min": -1.0,
    "Mean": 0.0, "Norm": 2.0, "requires_grad": false},
   {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [3, 4], "Max": 0.5, "Min": -0.5,
    "Mean": 0.1, "Norm": 1.0, "requires_grad": true}, null],
  "input_kwargs": {"scale": {"type": "int", "value": 2}},
  "output": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3], "Max": OUTMAX,
    "Min": -1.0, "Mean": 0.0, "Norm": OUTNORM, "requires_grad": true}]},
 "Functional.relu.0.forward": {"input_args": [
   {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3], "Max": OUTMAX, "Min": -1.0,
    "Mean": 0.0, "Norm": OUTNORM, "requires_grad": true}],
  "input_kwargs": {},
  "output": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3], "Max": OUTMAX,
    "Min": 0.0, "Mean": 0.5, "Norm": NaN, "requires_grad": true}]}
}})";

std::string DumpText(const std::string& max, const std::string& norm) {
  std::string s = kDumpA;
  for (auto [from, to] : {std::pair<std::string, std::string>{"OUTMAX", max}, {"OUTNORM", norm}}) {
    for (size_t at; (at = s.find(from)) != std::string::npos;) s.replace(at, from.size(), to);
  }
  return s;
}

TEST(CompareDump, RowsNamedAsMsprobeNamesThem) {
  auto d = ParseDumpJson(DumpText("1.5", "3.0"), "dump.json");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->entries.size(), 2u);
  const Entry& e = d->entries[0];
  ASSERT_EQ(e.rows.size(), 5u);
  EXPECT_EQ(e.rows[0].name, "Functional.linear.0.forward.input.0");
  EXPECT_EQ(e.rows[2].kind, Tensor::Kind::kNone);
  EXPECT_EQ(e.rows[3].name, "Functional.linear.0.forward.input.scale");
  EXPECT_EQ(e.rows[3].dtype, "<class 'int'>");
  EXPECT_EQ(e.rows[3].stat_text[0], "2");
  EXPECT_EQ(e.rows[4].name, "Functional.linear.0.forward.output.0");
  EXPECT_TRUE(std::isnan(d->entries[1].rows[1].stats[3]));  // a bare NaN literal
}

// torch.save writes a view's strides and its whole storage: a transposed, an expanded
// (stride 0) and a sliced (storage offset 4) tensor read in row-major order, as torch.load
// then .flatten() gives them (tests/data/compare/strided, made by torch 2.15).
TEST(CompareDump, StridedTensorFilesReadInRowMajorOrder) {
  const std::string dir = std::string(TS_SOURCE_DIR) + "/tests/data/compare/strided/";
  auto t = ReadTensorFile(dir + "transposed.pt");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(t->values, (std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  auto e = ReadTensorFile(dir + "expanded.pt");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->dtype, "torch.float64");
  EXPECT_EQ(e->values, (std::vector<double>{0, 1, 2, 0, 1, 2}));
  auto s = ReadTensorFile(dir + "sliced.pt");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(s->values, (std::vector<double>{4, 6, 8, 10}));
  // torch.zeros(1).expand(2**31): 1.5 KB that would gather 16 GB. Refused, naming the file.
  auto huge = ReadTensorFile(dir + "expanded_2g.pt");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(huge.status().message()),
              ::testing::HasSubstr("expanded_2g.pt: a strided view"));
}

// MindSpore (Float32, mindspore.bfloat16), numpy (float32) and torch spellings meet.
TEST(CompareDump, DtypesOfTheFrameworksNormalizeAlike) {
  EXPECT_EQ(NormalizedDtype("torch.bfloat16"), NormalizedDtype("BFloat16"));
  EXPECT_EQ(NormalizedDtype("mindspore.float32"), "float32");
  EXPECT_EQ(NormalizedDtype("Float32"), NormalizedDtype("torch.float32"));
  EXPECT_EQ(NormalizedDtype("Float"), "float32");
  EXPECT_EQ(NormalizedDtype("Int64"), NormalizedDtype("torch.int64"));
  EXPECT_EQ(NormalizedDtype("UInt8"), "uint8");
  EXPECT_NE(NormalizedDtype("Float16"), NormalizedDtype("torch.float32"));
}

TEST(CompareDump, CutFileKeepsCompleteEntries) {
  const std::string full = DumpText("1.5", "3.0");
  const size_t cut = full.find("\"Functional.relu.0.forward\"") + 40;
  auto d = ParseDumpJson(full.substr(0, cut), "dump.json");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->entries.size(), 1u);
  EXPECT_EQ(d->truncated_entries, 1);
  auto bad = ParseDumpJson(full.substr(0, 30), "dump.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dump.json: byte"), std::string::npos);
}

TEST(CompareStatistics, ColumnsAndFirstDivergence) {
  // linear's inputs agree, its output's Norm is 3.0 vs 2.0 (+50%): linear is to blame.
  auto a = ParseDumpJson(DumpText("1.5", "3.0"), "a");
  auto b = ParseDumpJson(DumpText("1.5", "2.0"), "b");
  ASSERT_TRUE(a.ok() && b.ok());
  PairReport r = ComparePair(*a, *b, Options());
  EXPECT_EQ(r.matched, 2);
  const RowCompare& out = r.entries[0].rows[4];
  EXPECT_EQ(out.stat_text[0], "0");      // Max diff: equal texts
  EXPECT_EQ(out.stat_text[3], "1.0");    // L2norm diff
  EXPECT_EQ(out.stat_text[7], "50.0%");  // NormRelativeErr
  // The inputs' NormRelativeErr is 0 and the output's 0.5 (not above 0.5: no error), over
  // 0.1: msprobe's warning.
  EXPECT_EQ(out.result, "warning");
  ASSERT_TRUE(r.has_divergence);
  EXPECT_EQ(r.first.name, "Functional.linear.0.forward");
  EXPECT_EQ(r.first.kind, "output");
}

TEST(CompareStatistics, FirstInputsDifferMeansDifferentData) {
  std::string text_b = DumpText("1.5", "3.0");
  text_b.replace(text_b.find("\"Norm\": 2.0"), 11, "\"Norm\": 2.1");
  auto a = ParseDumpJson(DumpText("1.5", "3.0"), "a");
  auto b = ParseDumpJson(text_b, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  PairReport r = ComparePair(*a, *b, Options());
  ASSERT_TRUE(r.has_divergence);
  EXPECT_EQ(r.first.kind, "input");
  EXPECT_EQ(r.first.name, "Functional.linear.0.forward");
}

TEST(CompareStatistics, InputsCastToBfloat16StillAgree) {
  // B feeds relu its input in bfloat16 (Norm 3.0 rounds to 3.0078125: 2^-8 relative) and relu's
  // output Norm is off by 10%: relu, the first op running in the narrower dtype, is to blame.
  std::string text_b = DumpText("1.5", "3.0");
  size_t relu = text_b.find("Functional.relu.0.forward");
  text_b.replace(text_b.find("torch.float32", relu), 13, "torch.bfloat16");
  text_b.replace(text_b.find("\"Norm\": 3.0", relu), 11, "\"Norm\": 3.0078125");
  text_b.replace(text_b.find("\"Mean\": 0.5", relu), 11, "\"Mean\": 0.55");
  auto a = ParseDumpJson(DumpText("1.5", "3.0"), "a");
  auto b = ParseDumpJson(text_b, "b");
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  PairReport r = ComparePair(*a, *b, Options());
  ASSERT_TRUE(r.has_divergence);
  EXPECT_EQ(r.first.name, "Functional.relu.0.forward");
  EXPECT_EQ(r.first.kind, "output");
  EXPECT_DOUBLE_EQ(r.entries[1].rows[0].cast_tolerance, 1.0 / 256);
}

TEST(CompareMatch, ShiftedIndicesMatchByStructureAndMappingRenames) {
  std::string text_b = DumpText("1.5", "3.0");
  text_b.replace(text_b.find("linear.0"), 8, "linear.7");
  auto a = ParseDumpJson(DumpText("1.5", "3.0"), "a");
  auto b = ParseDumpJson(text_b, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  PairReport r = ComparePair(*a, *b, Options());
  EXPECT_EQ(r.matched, 2);
  EXPECT_EQ(r.entries[0].how, "structure");
  EXPECT_FALSE(r.has_divergence);
  Options o;
  o.mapping = {{"linear.0", "linear.7"}};
  PairReport m = ComparePair(*a, *b, o);
  EXPECT_EQ(m.entries[0].how, "mapping");
}

TEST(CompareMapping, YamlSubset) {
  const std::string path = ::testing::TempDir() + "/mapping.yaml";
  std::ofstream(path) << "# renames\nModule.layers: 'Module.model.layers'\n\"a\": b  # x\n";
  auto m = ReadMapping(path);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].first, "Module.layers");
  EXPECT_EQ((*m)[0].second, "Module.model.layers");
  std::ofstream(path) << "no colon here\n";
  EXPECT_FALSE(ReadMapping(path).ok());
}

// Two metric logs with the same noisy curve (a fixed pseudo-random scatter), A with `edit`
// applied to its losses.
std::string CurveLog(const std::string& dir, const std::string& name,
                     void (*edit)(int step, double* loss)) {
  std::string text;
  for (int step = 1; step <= 60; ++step) {
    double loss = 4.0 - 0.02 * step + 0.1 * std::sin(step * 12.9898);  // trend + scatter
    if (edit) edit(step, &loss);
    text += "{\"step\": " + std::to_string(step) +
            ", \"loss\": " + (std::isnan(loss) ? std::string("NaN") : std::to_string(loss)) + "}\n";
  }
  const std::string path = dir + "/" + name + ".jsonl";
  test_util::WriteFile(path, text);
  return path;
}

TEST(CompareRuns, ALoneSpikeIsNoiseAnOffsetIsADivergence) {
  const std::string dir = test_util::TempDir("compare_runs");
  const std::string base = CurveLog(dir, "base", nullptr);
  auto same = CompareRuns(CurveLog(dir, "same", nullptr), base);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_FALSE(same->diverged);
  EXPECT_EQ(same->steps_compared, 60);
  EXPECT_GT(same->noise_a, 0.01);  // the scatter, not the trend (0.02 per step)
  auto spike = CompareRuns(CurveLog(dir, "spike",
                                    [](int s, double* l) {
                                      if (s == 30) *l += 1.0;
                                    }),
                           base);
  ASSERT_TRUE(spike.ok());
  EXPECT_FALSE(spike->diverged) << spike->diverge_step;  // one step over, the next ones not
  auto offset = CompareRuns(CurveLog(dir, "offset",
                                     [](int s, double* l) {
                                       if (s >= 40) *l += 0.5;
                                     }),
                            base);
  ASSERT_TRUE(offset.ok());
  EXPECT_EQ(offset->diverge_step, 40);
  EXPECT_EQ(offset->diverge_kind, "loss");
  auto nan = CompareRuns(CurveLog(dir, "nan",
                                  [](int s, double* l) {
                                    if (s == 50) *l = NAN;
                                  }),
                         base);
  ASSERT_TRUE(nan.ok());
  EXPECT_EQ(nan->diverge_step, 50);
  EXPECT_EQ(nan->diverge_kind, "nonfinite");
}

}  // namespace
}  // namespace trainscope::compare
