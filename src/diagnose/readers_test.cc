// The TensorBoard reader on events built with the generated protobuf classes (simple_value,
// tensors of each dtype, non-scalar and non-"scalars" tags left out, a bad CRC counted) and
// the Megatron-LM log reader (the TFRecord framing's own tests: src/tb/tb_test.cc). The real-run
// goldens of both formats are in tests/golden/diagnose.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "diagnose/series_builder.h"
#include "gtest/gtest.h"
#include "tensorboard/event.pb.h"
#include "trainscope/core/fake_os.h"
#include "trainscope/diagnose/series.h"
#include "trainscope/tb/event_writer.h"
#include "trainscope/tb/tfrecord.h"

namespace trainscope::diagnose {
namespace {

using tb::FrameTfRecord;

// A file_version record, then steps 1..n of "train/loss" (the encoding cycling through
// simple_value, float_val, double tensor_content, half_val), "train/learning_rate" as
// simple_value, "eval/loss" every 5th step, a histogram-like tensor and a text tag.
std::string TbFile(int n) {
  std::string file;
  tensorflow::Event first;
  first.set_wall_time(1.7e9);
  first.set_file_version("brain.Event:2");
  file += FrameTfRecord(first.SerializeAsString());
  for (int step = 1; step <= n; ++step) {
    tensorflow::Event e;
    e.set_wall_time(1.7e9 + step);
    e.set_step(step);
    double loss = 4.0 - 0.5 * step / n;  // exact in binary16 for n = 8
    tensorflow::Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag("train/loss");
    switch (step % 4) {
      case 0:
        v->set_simple_value(static_cast<float>(loss));
        break;
      case 1: {
        tensorflow::TensorProto* t = v->mutable_tensor();
        t->set_dtype(tensorflow::DT_FLOAT);
        t->add_float_val(static_cast<float>(loss));
        if (step == 1) v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("scalars");
        break;
      }
      case 2: {
        tensorflow::TensorProto* t = v->mutable_tensor();
        t->set_dtype(tensorflow::DT_DOUBLE);
        std::string bytes(8, '\0');
        std::memcpy(bytes.data(), &loss, 8);
        t->set_tensor_content(bytes);
        break;
      }
      case 3: {  // binary16 of 4 - 0.0625 k: sign 0, exponent 16 (2^1), fraction below
        tensorflow::TensorProto* t = v->mutable_tensor();
        t->set_dtype(tensorflow::DT_HALF);
        t->add_half_val((16 << 10) | static_cast<int>(std::lround((loss / 2 - 1) * 1024)));
        break;
      }
    }
    tensorflow::Summary::Value* lr = e.mutable_summary()->add_value();
    lr->set_tag("train/learning_rate");
    lr->set_simple_value(1e-3f);
    if (step % 5 == 0) {
      tensorflow::Summary::Value* ev = e.mutable_summary()->add_value();
      ev->set_tag("eval/loss");
      ev->set_simple_value(5.0f);
    }
    // Not scalars: a (2, 3) tensor under a loss-like tag, and a tag of the text plugin.
    tensorflow::Summary::Value* h = e.mutable_summary()->add_value();
    h->set_tag("grad_norm");
    h->mutable_tensor()->set_dtype(tensorflow::DT_FLOAT);
    h->mutable_tensor()->mutable_tensor_shape()->add_dim()->set_size(2);
    h->mutable_tensor()->mutable_tensor_shape()->add_dim()->set_size(3);
    for (int k = 0; k < 6; ++k) h->mutable_tensor()->add_float_val(1.0f);
    tensorflow::Summary::Value* txt = e.mutable_summary()->add_value();
    txt->set_tag("loss");
    txt->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
    txt->mutable_tensor()->set_dtype(tensorflow::DT_FLOAT);
    txt->mutable_tensor()->add_float_val(99.0f);
    file += FrameTfRecord(e.SerializeAsString());
  }
  return file;
}

TEST(TensorBoard, ScalarsAsSimpleValueAndTensors) {
  const int n = 8;
  std::string file = TbFile(n);
  std::string path = "run/events.out.tfevents.1700000000.host.1.0";
  ASSERT_EQ(DetectKind(path, file.substr(0, 64)), FileKind::kTensorBoard);
  absl::StatusOr<Series> s = ParseSeries(path, FileKind::kTensorBoard, file);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->format, "tensorboard");
  EXPECT_EQ(s->records, n + 1);
  EXPECT_EQ(s->bad_records, 0);
  ASSERT_EQ(s->loss.size(), static_cast<size_t>(n));
  for (int step = 1; step <= n; ++step) {
    EXPECT_EQ(s->loss[step - 1].step, step);
    EXPECT_DOUBLE_EQ(s->loss[step - 1].value, 4.0 - 0.5 * step / n) << "step " << step;
  }
  EXPECT_EQ(s->lr.size(), static_cast<size_t>(n));
  EXPECT_FLOAT_EQ(static_cast<float>(s->lr[0].value), 1e-3f);
  ASSERT_EQ(s->val_loss.size(), 1u);
  EXPECT_EQ(s->val_loss[0].step, 5);
  EXPECT_TRUE(s->grad_norm.empty());  // the (2, 3) tensor is not a scalar
}

// ReadSeries reads through Os: files that exist only in a FakeOs are read and parsed.
TEST(Readers, ReadSeriesOnAFakeOs) {
  FakeOs os;
  os.AddFile("/run/metrics.jsonl",
             "{\"step\": 1, \"loss\": 2.5, \"lr\": 0.001}\n"
             "{\"step\": 2, \"loss\": 2.25}\n");
  os.AddFile("/run/events.out.tfevents.1700000000.host.1.0", TbFile(8));
  absl::StatusOr<Series> s = ReadSeries("/run/metrics.jsonl", &os);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->loss.size(), 2u);
  EXPECT_EQ(s->loss[1].step, 2);
  EXPECT_DOUBLE_EQ(s->loss[1].value, 2.25);
  s = ReadSeries("/run/events.out.tfevents.1700000000.host.1.0", &os);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->loss.size(), 8u);
  EXPECT_EQ(ReadSeries("/run/absent.jsonl", &os).status().code(), absl::StatusCode::kNotFound);
  std::string text;
  EXPECT_TRUE(ReadWholeFile("/run/metrics.jsonl", &text, &os));
  EXPECT_EQ(text.substr(0, 10), "{\"step\": 1");
}

TEST(TensorBoard, BadCrcCountedAndReadingGoesOn) {
  std::string file = TbFile(8);
  // Flip a byte inside the third record's data (after the 12-byte header).
  size_t off = 0;
  for (int k = 0; k < 2; ++k) {
    uint64_t len;
    std::memcpy(&len, file.data() + off, 8);
    off += 12 + len + 4;
  }
  file[off + 20] ^= 0x10;
  file.resize(file.size() - 5);  // and the last record cut short
  absl::StatusOr<Series> s = ParseSeries("x.tfevents.1", FileKind::kTensorBoard, file);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->loss.size(), 6u);  // steps 1, 3..7
  EXPECT_EQ(s->loss[1].step, 3);
  EXPECT_EQ(s->bad_records, 2);
  EXPECT_NE(s->first_bad.find("data CRC mismatch"), std::string::npos) << s->first_bad;
}

TEST(TensorBoard, NoLossTagIsAnErrorNamingTheFile) {
  tensorflow::Event e;
  e.set_step(1);
  tensorflow::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag("accuracy");
  v->set_simple_value(0.5f);
  absl::StatusOr<Series> s =
      ParseSeries("a.tfevents.1", FileKind::kTensorBoard, FrameTfRecord(e.SerializeAsString()));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("a.tfevents.1: no loss values"), std::string::npos)
      << s.status();
  // Bytes that are no event file at all: nothing read, the damage named.
  s = ParseSeries("b.tfevents.1", FileKind::kTensorBoard, std::string(100, 'x'));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("length CRC mismatch"), std::string::npos) << s.status();
}

// What the trainer's writer (tb/event_writer.h) writes, diagnose reads back: the same steps
// and values under the trainer's tags, found by name in a real file on disk.
TEST(TensorBoard, ReadsTheWritersFiles) {
  const std::string dir = ::testing::TempDir() + "/readers_test_tb_writer";
  std::filesystem::remove_all(dir);
  tb::EventWriterOptions o;
  o.host = "testhost";
  std::string path;
  {
    auto w = tb::EventWriter::Open(dir, o);
    ASSERT_TRUE(w.ok()) << w.status();
    path = (*w)->path();
    for (int step = 1; step <= 30; ++step) {
      ASSERT_TRUE((*w)->AddScalars(step, 1750000000000000LL + step,
                                   {{"train/loss", 5.0 - 0.1 * step},
                                    {"train/lr", 1e-4 * step},
                                    {"train/grad_norm", 0.5 + step},
                                    {"phase/forward_ms", 12.5}})
                      .ok());
    }
  }  // closed: flushed
  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(DetectKind(path, file.substr(0, 64)), FileKind::kTensorBoard);
  absl::StatusOr<Series> s = ParseSeries(path, FileKind::kTensorBoard, file);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->loss.size(), 30u);
  ASSERT_EQ(s->lr.size(), 30u);
  ASSERT_EQ(s->grad_norm.size(), 30u);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(s->loss[i].step, i + 1);
    EXPECT_EQ(s->loss[i].value, static_cast<float>(5.0 - 0.1 * (i + 1)));
    EXPECT_EQ(s->lr[i].value, static_cast<float>(1e-4 * (i + 1)));
    EXPECT_EQ(s->grad_norm[i].value, static_cast<float>(0.5 + i + 1));
  }
  EXPECT_EQ(s->bad_records, 0);
  EXPECT_EQ(s->records, 31);  // file_version + 30 steps
  std::filesystem::remove_all(dir);
}

constexpr const char* kMegatronLog =
    "using world size: 8, data-parallel size: 8\n"
    "------------------------ arguments ------------------------\n"
    "  log_interval .................................... 10\n"
    "-------------------- end of arguments ---------------------\n"
    "[default0]: [2024-05-01 12:00:00] iteration       10/     100 | consumed samples:  320 | "
    "elapsed time per iteration (ms): 512.3 | learning rate: 1.500000E-04 | global batch "
    "size:    32 | lm loss: 7.123456E+00 | loss scale: 65536.0 | grad norm: 2.345 | number of "
    "skipped iterations:   1 | number of nan iterations:   0 |\n"
    "[Rank 0] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0\n"
    " iteration       20/     100 | consumed samples:  640 | learning rate: 1.400000E-04 | "
    "lm loss: 6.500000E+00 | grad norm: 1.9 | number of skipped iterations:   0 | number of "
    "nan iterations:   0 |\n"
    "-----------------------------------------------------------------------------------------\n"
    " validation loss at iteration 20 | lm loss value: 6.600000E+00 | lm loss PPL: "
    "7.35E+02 | \n"
    " iteration       30/     100 | consumed samples:  960 | learning rate: 1.300000E-04 | "
    "grad norm: nan | number of skipped iterations:   0 | number of nan iterations:   1 |\n"
    " iteration       40/     100 | lm loss: 6.x |\n"
    " validation loss at the end of training for val data | lm loss value: 6.400000E+00 | \n"
    " validation loss at the end of training for test data | lm loss value: 9.0 | \n";

TEST(Megatron, IterationAndValidationLines) {
  std::string text = kMegatronLog;
  EXPECT_EQ(DetectKind("logs/train.log", text), FileKind::kMegatronLog);
  EXPECT_EQ(DetectKind("logs/train.log", "hello\n"), FileKind::kUnknown);
  EXPECT_EQ(DetectKind("slurm-1.out", text.substr(text.find("[default0]"))),
            FileKind::kMegatronLog);
  absl::StatusOr<Series> s = ParseSeries("train.log", FileKind::kMegatronLog, text);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->format, "megatron_log");
  ASSERT_EQ(s->loss.size(), 3u);
  EXPECT_EQ(s->loss[0].step, 10);
  EXPECT_DOUBLE_EQ(s->loss[0].value, 7.123456);
  EXPECT_DOUBLE_EQ(s->loss[1].value, 6.5);
  EXPECT_EQ(s->loss[2].step, 30);
  EXPECT_TRUE(std::isnan(s->loss[2].value));  // the interval had a NaN iteration
  ASSERT_EQ(s->lr.size(), 3u);
  EXPECT_DOUBLE_EQ(s->lr[0].value, 1.5e-4);
  ASSERT_EQ(s->grad_norm.size(), 3u);
  EXPECT_TRUE(std::isnan(s->grad_norm[2].value));
  ASSERT_EQ(s->val_loss.size(), 2u);  // at 20, and at the end (the last iteration, 40)
  EXPECT_EQ(s->val_loss[0].step, 20);
  EXPECT_DOUBLE_EQ(s->val_loss[0].value, 6.6);
  EXPECT_EQ(s->val_loss[1].step, 40);
  EXPECT_EQ(s->skipped_iterations, 1);
  EXPECT_EQ(s->nan_iterations, 1);
  EXPECT_EQ(s->bad_records, 1);
  EXPECT_EQ(s->first_bad, "line 11: a field is not a number");
}

// A trainscope metrics log with everything the merge of chunks must get right: lines without
// a step, a bad line, a repeated step, blank lines, a nonfinite record, the end record.
TEST(Readers, JsonlInChunksEqualsOnePass) {
  std::string text =
      "{\"type\": \"header\", \"format\": \"trainscope.train_metrics\", \"rank\": 3}\n";
  for (int i = 1; i <= 200; ++i) {
    if (i % 37 == 0) text += "{\"type\": \"step\", \"loss\": oops}\n";
    if (i % 41 == 0) text += "\n";
    std::string step =
        i % 23 == 0 ? "" : "\"step\": " + std::to_string(i % 50 == 0 ? i - 1 : i) + ", ";
    text += "{\"type\": \"step\", " + step + "\"loss\": " + std::to_string(5.0 - i * 0.01) +
            ", \"lr\": 1e-3, \"phases_ms\": {\"forward\": 1}, \"grad_norm\": " +
            (i == 150 ? "null" : "1.5") + "}\n";
  }
  text += "{\"type\": \"nonfinite\", \"step\": 201, \"phase\": \"optimizer\"}\n";
  text += "{\"type\": \"end\", \"reason\": \"error\", \"step\": 201}\n";
  absl::StatusOr<Series> one = internal::ParseJsonlInChunks("m.jsonl", text, true, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->rank, 3);
  EXPECT_EQ(one->end_reason, "error");
  EXPECT_EQ(one->bad_records, 5);
  EXPECT_EQ(one->first_bad.rfind("line 38: ", 0), 0u) << one->first_bad;
  EXPECT_EQ(one->loss.back().step, 202);
  EXPECT_TRUE(std::isnan(one->loss.back().value));
  for (int chunks : {2, 3, 7, 64}) {
    absl::StatusOr<Series> many = internal::ParseJsonlInChunks("m.jsonl", text, true, chunks);
    ASSERT_TRUE(many.ok()) << many.status();
    EXPECT_EQ(many->records, one->records) << chunks;
    EXPECT_EQ(many->bad_records, one->bad_records) << chunks;
    EXPECT_EQ(many->first_bad, one->first_bad) << chunks;
    EXPECT_EQ(many->repeated_steps, one->repeated_steps) << chunks;
    EXPECT_EQ(many->rank, one->rank) << chunks;
    EXPECT_EQ(many->end_reason, one->end_reason) << chunks;
    ASSERT_EQ(many->loss.size(), one->loss.size()) << chunks;
    for (size_t i = 0; i < one->loss.size(); ++i) {
      EXPECT_EQ(many->loss[i].step, one->loss[i].step) << chunks << " " << i;
      EXPECT_TRUE(many->loss[i].value == one->loss[i].value ||
                  (std::isnan(many->loss[i].value) && std::isnan(one->loss[i].value)));
    }
    EXPECT_EQ(many->grad_norm.size(), one->grad_norm.size()) << chunks;
  }
}

TEST(Readers, TensorBoardAndMegatronTagNames) {
  EXPECT_EQ(CanonicalMetric("train/learning_rate"), "lr");
  EXPECT_EQ(CanonicalMetric("train/grad_norm"), "grad_norm");
  EXPECT_EQ(CanonicalMetric("Loss/train"), "loss");
  EXPECT_EQ(CanonicalMetric("Loss/val"), "val_loss");
  EXPECT_EQ(CanonicalMetric("lm loss validation"), "val_loss");
  EXPECT_EQ(CanonicalMetric("learning-rate"), "lr");
  EXPECT_EQ(CanonicalMetric("train/epoch"), "");
}

}  // namespace
}  // namespace trainscope::diagnose
