// core/pickle.h against real pickles: Python's own pickle at protocols 0-5 (fixtures written
// by tests/data/pickle/make_fixtures.py, with the expected tree computed by Python), a
// torch 1.13 DCP .metadata, and hand-made malformed and hostile inputs.
#include "trainscope/core/pickle.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace trainscope::pickle {
namespace {

using nlohmann::json;

std::string PickleFixture(const std::string& name) {
  const char* src = std::getenv("TS_SOURCE_DIR");
  std::ifstream in(std::string(src ? src : TS_SOURCE_DIR) + "/tests/data/pickle/" + name,
                   std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

TEST(Pickle, PythonValuesAtEveryProtocol) {
  const json expected = json::parse(PickleFixture("values.expected.json"));
  for (int p = 0; p <= 5; ++p) {
    const std::string bytes = PickleFixture("values_p" + std::to_string(p) + ".pkl");
    ASSERT_FALSE(bytes.empty()) << p;
    EXPECT_EQ(LooksLikePickle(bytes), p >= 2) << p;
    auto v = Parse(bytes);
    ASSERT_TRUE(v.ok()) << "protocol " << p << ": " << v.status();
    EXPECT_TRUE(ToJson(*v) == expected)
        << "protocol " << p << ": " << json::diff(expected, ToJson(*v)).dump();
  }
}

TEST(Pickle, KindsAndRecords) {
  auto v = Parse(PickleFixture("values_p4.pkl"));
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->kind, Value::Kind::kDict);
  EXPECT_EQ(v->Find("big")->items[2].kind, Value::Kind::kBigInt);
  EXPECT_EQ(v->Find("big")->items[2].text, "10000000000000000000000000000000000000000");
  EXPECT_EQ(v->Find("big")->items[1].text, "-18446744073709551621");
  EXPECT_EQ(v->Find("tuples")->items[1].kind, Value::Kind::kTuple);
  EXPECT_EQ(v->Find("set")->kind, Value::Kind::kSet);
  EXPECT_EQ(v->Find("bytearray")->kind, Value::Kind::kBytes);
  EXPECT_EQ(v->Find("ordered")->kind, Value::Kind::kDict);
  const Value* point = v->Find("dataclass");
  ASSERT_EQ(point->kind, Value::Kind::kRecord);
  EXPECT_EQ(point->class_name(), "__main__.Point");
  EXPECT_EQ(point->Find("x")->integer, 3);
  const Value* tk = v->Find("tuple_keys");
  ASSERT_EQ(tk->dict.size(), 1u);
  EXPECT_EQ(tk->dict[0].key.kind, Value::Kind::kTuple);
  EXPECT_EQ(v->Find("missing"), nullptr);
}

// torch 1.13's DCP: dtypes are globals (torch.float32), shapes torch.Size -> tuples, the
// memory format an enum member reached through builtins.getattr.
TEST(Pickle, TorchDcpMetadata) {
  auto v = Parse(PickleFixture("dcp/.metadata"));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->class_name(), "torch.distributed._shard.checkpoint.metadata.Metadata");
  const Value* sdm = v->Find("state_dict_metadata");
  ASSERT_NE(sdm, nullptr);
  const Value* w = sdm->Find("model.0.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->class_name(), "torch.distributed._shard.checkpoint.metadata.TensorStorageMetadata");
  const Value* size = w->Find("size");
  ASSERT_EQ(size->kind, Value::Kind::kTuple);
  ASSERT_EQ(size->items.size(), 2u);
  EXPECT_EQ(size->items[0].integer, 3);
  EXPECT_EQ(size->items[1].integer, 4);
  const Value& props = w->Find("properties")->record->state;
  ASSERT_EQ(props.kind, Value::Kind::kTuple);
  EXPECT_EQ(props.items[0].kind, Value::Kind::kGlobal);
  EXPECT_EQ(props.items[0].text, "torch.float32");
  EXPECT_EQ(props.items[1].text, "torch.strided");
  EXPECT_EQ(props.items[3].class_name(), "");  // getattr(MEM_FORMAT_ENCODING, ...) -> global
  EXPECT_EQ(props.items[3].text,
            "torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING."
            "TORCH_CONTIGUOUS_FORMAT");
  EXPECT_EQ(sdm->Find("optim.param_groups")->class_name(),
            "torch.distributed._shard.checkpoint.metadata.BytesStorageMetadata");
}

TEST(Pickle, HandMadeOpcodes) {
  // Protocol 0 text opcodes: INT, LONG, FLOAT, STRING with escapes, UNICODE with \u.
  auto v = Parse("(I42\nL-12345678901234567890123L\nF2.5\nS'a\\'b\\x41\\n'\nVx\\u00e9y\ntp0\n.");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->items.size(), 5u);
  EXPECT_EQ(v->items[0].integer, 42);
  EXPECT_EQ(v->items[1].text, "-12345678901234567890123");
  EXPECT_EQ(v->items[2].real, 2.5);
  EXPECT_EQ(v->items[3].text, "a'bA\n");
  EXPECT_EQ(v->items[4].text, "x\xc3\xa9y");
  // INST and OBJ (protocols 0-1) make records; PERSID a persistent id.
  v = Parse("(I1\nimod\nCls\n(cmod\nOther\nI2\noPpid7\n\x87.");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->items[0].class_name(), "mod.Cls");
  EXPECT_EQ(v->items[0].record->args[0].integer, 1);
  EXPECT_EQ(v->items[1].class_name(), "mod.Other");
  EXPECT_EQ(v->items[2].kind, Value::Kind::kPersistentId);
  EXPECT_EQ(v->items[2].items[0].text, "pid7");
  // NEWOBJ_EX keeps keyword arguments; a dict key set twice keeps the last value.
  v = Parse(
      Bytes({0x80, 4,    0x8c, 1,   'm', 0x8c, 1, 'C', 0x93, ')', '}', 0x8c, 1,   'k',  'K', 5,
             's',  0x92, '}',  'K', 1,   'K',  2, 's', 'K',  1,   'K', 3,    's', 0x86, '.'}));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->items[0].record->kwargs[0].value.integer, 5);
  ASSERT_EQ(v->items[1].dict.size(), 1u);
  EXPECT_EQ(v->items[1].dict[0].value.integer, 3);
}

// Dicts past the linear-scan size use an index of their keys; memo indices far beyond the
// input's size (LONG_BINPUT) live in the sparse memo.
TEST(Pickle, LargeDictsAndSparseMemo) {
  std::string big = Bytes({0x80, 2, '}', '('});
  for (int i = 0; i < 40; ++i) big += Bytes({'K', i, 'K', i});
  big += Bytes({'K', 5, 'K', 99, 'u', '.'});
  auto v = Parse(big);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->dict.size(), 40u);
  EXPECT_EQ(v->dict[5].value.integer, 99);
  v = Parse(
      Bytes({0x80, 2, 'K', 7, 'r', 0xf0, 0xff, 0xff, 0xff, '0', 'j', 0xf0, 0xff, 0xff, 0xff, '.'}));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->integer, 7);
}

void ExpectPickleError(const std::string& bytes, const std::string& part) {
  auto v = Parse(bytes);
  ASSERT_FALSE(v.ok()) << ToJson(*v).dump();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(v.status().message()).find(part), std::string::npos) << v.status();
}

TEST(Pickle, MalformedInputsNameOffsetAndOpcode) {
  ExpectPickleError("", "byte 0: no STOP");
  ExpectPickleError(Bytes({0x80, 2, 'X', 0xff, 0xff, 0xff, 0x7f, 'a'}),
                    "byte 2: BINUNICODE: needs 2147483647 bytes, 1 left");
  ExpectPickleError(Bytes({0x80, 9}), "byte 0: PROTO: unsupported protocol 9");
  ExpectPickleError(Bytes({0x80, 2, 'a', '.'}), "byte 2: APPEND: the stack is empty");
  ExpectPickleError(Bytes({0x80, 2, 'K', 1, 'K', 2, 'a', '.'}),
                    "byte 6: APPEND: the target is a int");
  ExpectPickleError(Bytes({0x80, 2, 'h', 3, '.'}), "byte 2: BINGET: memo entry 3 was never set");
  ExpectPickleError(Bytes({0x80, 2, 't', '.'}), "byte 2: TUPLE: no MARK");
  ExpectPickleError(Bytes({0x80, 2, 0x82, 1, '.'}), "EXT1: extension codes");
  ExpectPickleError(Bytes({0x80, 5, 0x97, '.'}), "NEXT_BUFFER: out-of-band buffers");
  ExpectPickleError(Bytes({0x80, 2, 0xff, '.'}), "byte 2: opcode 0xff: unknown opcode");
  ExpectPickleError(Bytes({0x80, 2, '(', '.'}), "STOP: the stack is empty");
  ExpectPickleError(Bytes({0x80, 4, 0x95, 100, 0, 0, 0, 0, 0, 0, 0, 'N', '.'}), "FRAME");
  ExpectPickleError("I12x\n.", "byte 0: INT: not a decimal integer");
  ExpectPickleError(Bytes({0x80, 2, 'K', 1, 'K', 2, 'R', '.'}),
                    "byte 6: REDUCE: the arguments are not a tuple");
}

TEST(Pickle, HostileInputsAreBounded) {
  // A list that contains itself: l = []; l.append(l).
  ExpectPickleError(Bytes({0x80, 2, ']', 'q', 0, 'h', 0, 'a', '.'}),
                    "byte 2: the list made here: a structure that contains itself");
  // 2^60 copies from 60 doublings: t = (t, t), 60 times.
  std::string bomb = Bytes({0x80, 2, ')'});
  for (int i = 0; i < 60; ++i) bomb += Bytes({'2', 0x86});
  bomb += ".";
  ExpectPickleError(bomb, "shared references expand to more than");
  // 10,000 nested lists: deeper than max_depth.
  std::string deep = Bytes({0x80, 2});
  for (int i = 0; i < 10000; ++i) deep += "]";
  for (int i = 0; i < 9999; ++i) deep += "a";
  deep += ".";
  ExpectPickleError(deep, "nested deeper than 200 levels");
  Options tight;
  tight.max_memo_entries = 2;
  auto v = Parse(Bytes({0x80, 4, 'N', 0x94, 0x94, 0x94, '.'}), tight);
  EXPECT_FALSE(v.ok());
}

}  // namespace
}  // namespace trainscope::pickle
