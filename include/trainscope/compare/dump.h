// Reading msprobe (MindStudio Probe) dumps without Python or libtorch: the layout
// `dump_path/step<N>/rank<R>/` (or `proc<pid>`) holding dump.json, stack.json,
// construct.json and, in tensor mode, dump_tensor_data/ (`.pt` from PyTorch: a torch.save
// zip read with core/pickle.h; `.npy` from MindSpore). docs/formats.md "msprobe dumps".
//
// Contract:
//  - dump.json is written by msprobe only at stop(): a file cut short keeps every complete
//    entry of "data"; the cut entry is counted in Dump::truncated_entries, and a JSON error
//    before the first entry is the file's error. Python's bare NaN / Infinity / -Infinity
//    literals are read as the numbers they stand for.
//  - Every leaf of an entry becomes one Tensor row named as msprobe's compare names it
//    (`<entry>.input.<i>`, `.input.<kwarg>`, nested `<entry>.input.<i>.<j>`, `.output.<i>`,
//    `.parameters.<name>`, `<entry>.<param>` under parameters_grad): tensors, None
//    (kind kNone) and non-tensor values (kind kValue: dtype "<class 'int'>" as msprobe
//    writes it, the value in Max/Min/Mean/Norm when it is a number).
//  - stack.json: both msprobe layouts ({"0": [[names], [frames]]} and {name: [frames]});
//    construct.json: entry -> enclosing module (null at the top). Either may be absent.
//  - Errors name the file and, for malformed JSON, the byte offset. Pure functions of the
//    file system; thread-safe.
#ifndef TRAINSCOPE_COMPARE_DUMP_H_
#define TRAINSCOPE_COMPARE_DUMP_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace trainscope::compare {

// Where a row sits in its entry: msprobe's "state".
enum class State { kInput, kOutput, kParameters, kParametersGrad };
const char* StateName(State s);  // "input", "output", "parameters", "parameters_grad"

// One leaf of an entry: a tensor record, None, or a non-tensor argument.
struct Tensor {
  enum class Kind { kTensor, kNone, kValue };
  Kind kind = Kind::kTensor;
  std::string name;    // msprobe's row name: "Functional.conv2d.0.forward.input.0"
  std::string suffix;  // the part after the entry name: "input.0", "weight"
  State state = State::kInput;
  std::string type;   // "torch.Tensor", "int", "slice", ...
  std::string dtype;  // "torch.float32"; "<class 'int'>" for values; "" for None
  std::vector<int64_t> shape;
  bool has_shape = false;
  // Max, Min, Mean, Norm; `has_stats[i]` false when the record lacks it (or it is not a
  // number: a device string, a bool). NaN and +-inf are kept.
  double stats[4] = {0, 0, 0, 0};
  bool has_stats[4] = {false, false, false, false};
  // The same as msprobe's csv prints them: "1.0", "2" (an int stays an int), "True", "inf",
  // "Nan", "None" when absent.
  std::string stat_text[4] = {"None", "None", "None", "None"};
  std::string value_text;  // a value's JSON text (kValue), for display and CSV
  std::string md5;         // "md5" mode: msprobe's CRC-32 as 8 hex digits
  std::string data_name;   // tensor mode: file name in dump_tensor_data/ ("" when none)
  int requires_grad = -1;  // -1 unknown, 0 false, 1 true
};

// One API or module call of dump.json's "data".
struct Entry {
  std::string name;          // "Functional.linear.5.forward", "Module.fc.Linear.forward.0"
  std::vector<Tensor> rows;  // in msprobe's order: input_args, input_kwargs, input, output,
                             // parameters (parameters_grad entries: their gradients)
  int order = 0;             // position in dump.json (execution order)
};

// One dump folder (one step of one rank).
struct Dump {
  std::string dir;            // the folder of dump.json
  std::string step;           // "step0" ("" when the folder is not under a step folder)
  std::string rank;           // "rank0", "proc2016" ("" likewise)
  std::string task;           // "statistics", "tensor", "md5", ...
  std::string level;          // "L0", "L1", "mix", ...
  std::string framework;      // "pytorch", "mindspore", "mindtorch"
  std::string dump_data_dir;  // tensor mode: the folder of the tensor files
  std::vector<Entry> entries;
  int truncated_entries = 0;  // entries cut off by a dump.json that ends early
  int64_t truncated_at = -1;  // byte offset where dump.json ended early
  int malformed_entries = 0;  // entries whose value is not an object
  std::map<std::string, std::vector<std::string>> stack;  // entry -> frames
  std::map<std::string, std::string> parent;              // entry -> enclosing module
  std::vector<std::string> notes;  // what could not be read (stack.json, construct.json)
};

// Parses dump.json's text (`path` only names it in errors). Errors: InvalidArgument
// "<path>: byte <B>: ..." when no entry can be read (not JSON, not an object, cut before
// "data"); a file cut inside "data" is not an error (Dump::truncated_entries).
absl::StatusOr<Dump> ParseDumpJson(std::string_view text, const std::string& path);

// Reads the dump in `dir` (the folder of dump.json): dump.json, stack.json, construct.json.
// Errors: NotFound "<dir>/dump.json: cannot open"; those of ParseDumpJson.
absl::StatusOr<Dump> ReadDumpDir(const std::string& dir);

// The dump folders under `path`, a dump root (step folders), a step folder (rank folders)
// or a rank folder (dump.json itself, or the file): each with its step and rank names, in
// step then rank order (numeric where the names end in numbers). NotFound when `path`
// does not exist or holds no dump.json within two levels.
struct DumpLocation {
  std::string dir, step, rank;
};
absl::StatusOr<std::vector<DumpLocation>> FindDumps(const std::string& path);

// A tensor file of a tensor-mode dump as float64 values in row-major order, and its shape
// and dtype ("torch.float32" spelling for .pt, numpy's for .npy: "float32"). Errors:
// NotFound (missing file), InvalidArgument / Unimplemented naming the file (not a
// torch.save of one tensor, a compressed or big-endian archive, a dtype not decoded).
struct TensorData {
  std::vector<double> values;
  std::vector<int64_t> shape;
  std::string dtype;
};
absl::StatusOr<TensorData> ReadTensorFile(const std::string& path);

}  // namespace trainscope::compare

#endif  // TRAINSCOPE_COMPARE_DUMP_H_
