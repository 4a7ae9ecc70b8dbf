// The trainer's op dumps in msprobe's layout (see dump_tap.h and trainscope/train/dump.h).
#include "train/dump_tap.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"
#include "trainscope/core/status.h"

namespace trainscope::train {

namespace {

std::string Quote(const std::string& s) { return nlohmann::json(s).dump(); }

// One tensor file of a dump: a plain write, no fsync per file (a step writes hundreds).
// dump.json, written atomically once the step's tensors are all out, is what makes the
// step's dump complete.
absl::Status WriteTensorFile(const std::string& path, const std::vector<char>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int saved = errno;
  if (std::fclose(f) != 0 || !written) {
    return absl::InternalError(
        absl::StrCat(path, ": write failed: ", std::strerror(written ? errno : saved)));
  }
  return absl::OkStatus();
}

// A number as Python's json module writes it: shortest round-trip digits, NaN / Infinity.
std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// torch's Python spelling of a dtype, as msprobe writes it.
std::string DtypeName(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "torch.float32";
    case at::kDouble:
      return "torch.float64";
    case at::kHalf:
      return "torch.float16";
    case at::kBFloat16:
      return "torch.bfloat16";
    case at::kLong:
      return "torch.int64";
    case at::kInt:
      return "torch.int32";
    case at::kShort:
      return "torch.int16";
    case at::kChar:
      return "torch.int8";
    case at::kByte:
      return "torch.uint8";
    case at::kBool:
      return "torch.bool";
    default:
      return absl::StrCat("torch.", c10::toString(t));
  }
}

// Max, Min, Mean, Norm as msprobe's statistics give them (in the tensor's own dtype).
std::string Stats(const torch::Tensor& x) {
  std::string s[4] = {"null", "null", "null", "null"};
  if (x.numel() > 0) {
    if (x.scalar_type() == at::kBool) {
      s[0] = x.any().item<bool>() ? "true" : "false";
      s[1] = x.all().item<bool>() ? "true" : "false";
    } else if (x.dim() == 0) {
      s[0] = s[1] = s[2] = s[3] =
          x.is_floating_point() ? Number(x.item<double>()) : std::to_string(x.item<int64_t>());
    } else if (x.is_floating_point()) {
      s[0] = Number(torch::max(x).item<double>());
      s[1] = Number(torch::min(x).item<double>());
      s[2] = Number(torch::mean(x).item<double>());
      s[3] = Number(torch::norm(x).item<double>());
    } else if (!x.is_complex()) {
      s[0] = std::to_string(torch::max(x).item<int64_t>());
      s[1] = std::to_string(torch::min(x).item<int64_t>());
    }
  }
  return absl::StrCat("\"Max\": ", s[0], ", \"Min\": ", s[1], ", \"Mean\": ", s[2],
                      ", \"Norm\": ", s[3]);
}

// The CRC-32 of the tensor's bytes in its own dtype, 8 hex digits (msprobe's "md5" field).
std::string Crc32(const torch::Tensor& dense_cpu) {
  const auto* p = static_cast<const Bytef*>(dense_cpu.data_ptr());
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t left = dense_cpu.numel() * dense_cpu.element_size();
  while (left > 0) {
    const uInt n = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = crc32(crc, p, n);
    p += n;
    left -= n;
  }
  return absl::StrFormat("%08x", crc);
}

// The last dot-separated part of a site name ("blocks.0.fc_proj" -> "fc_proj").
std::string Leaf(const std::string& site) {
  const size_t dot = site.rfind('.');
  return dot == std::string::npos ? site : site.substr(dot + 1);
}

}  // namespace

DumpTap::DumpTap(Gpt model, ModelTap* inner,
                 std::vector<std::pair<std::string, torch::Tensor>> named, DumpOptions options,
                 int rank, std::string root)
    : model_(std::move(model)),
      inner_(inner),
      named_(std::move(named)),
      options_(std::move(options)),
      rank_(rank),
      root_(std::move(root)) {
  site_names_ = model_->SiteNames();
  param_site_.assign(named_.size(), -1);
  bool head_module = false;
  for (const auto& [name, p] : named_) head_module |= name == "head.weight";
  const bool mix = options_.level == "mix";
  for (size_t s = 0; s < site_names_.size(); ++s) {
    const std::string& name = site_names_[s];
    const std::string leaf = Leaf(name);
    Site site;
    const char* cls = nullptr;
    if (leaf == "wte" || leaf == "wpe") cls = "Embedding";
    if (leaf == "ln1" || leaf == "ln2" || leaf == "ln_f") cls = "LayerNorm";
    if (leaf == "qkv" || leaf == "proj" || leaf == "fc" || leaf == "fc_proj") cls = "Linear";
    if (leaf == "head" && head_module) cls = "Linear";
    if (cls != nullptr) {
      site.prefix = absl::StrCat("Module.", name, ".", cls);
      site.module = true;
      for (size_t i = 0; i < named_.size(); ++i) {
        const std::string& pn = named_[i].first;
        if (pn.size() > name.size() + 1 && pn.compare(0, name.size() + 1, name + ".") == 0 &&
            pn.find('.', name.size() + 1) == std::string::npos) {
          site.params.push_back(static_cast<int>(i));
          param_site_[i] = static_cast<int>(s);
        }
      }
    } else if (mix && leaf == "gelu") {
      site.prefix = "Functional.gelu";
    } else if (mix && leaf == "head") {
      site.prefix = "Functional.linear";  // the tied head: F::linear(x, wte.weight)
    }
    sites_.push_back(std::move(site));
  }
  pending_input_.assign(sites_.size(), -1);
}

DumpTap::~DumpTap() {
  if (active_) {
    model_->SetTap(inner_);
    UnhookParameters();
  }
}

void DumpTap::BeginStep(int step) {
  if (!std::binary_search(options_.steps.begin(), options_.steps.end(), step)) return;
  std::lock_guard<std::mutex> lock(mu_);
  active_ = true;
  step_ = step;
  dir_ = absl::StrCat(root_, "/step", step, "/rank", rank_);
  counts_.clear();
  entries_.clear();
  backward_of_.clear();
  forward_site_.clear();
  grads_.clear();
  failures_.clear();
  if (options_.mode == "tensor") {
    absl::Status made = MakeDirs(dir_ + "/dump_tensor_data");
    if (!made.ok()) failures_.push_back(std::string(made.message()));
  }
  pending_input_.assign(sites_.size(), -1);
  model_->SetTap(this);
  HookParameters();
}

void DumpTap::HookParameters() {
  for (size_t i = 0; i < named_.size(); ++i) {
    if (param_site_[i] < 0 || !named_[i].second.requires_grad()) continue;
    param_hooks_.emplace_back(
        i, named_[i].second.register_hook([this, i](torch::Tensor g) { OnParamGrad(i, g); }));
  }
}

void DumpTap::UnhookParameters() {
  for (const auto& [i, h] : param_hooks_) named_[i].second.remove_hook(h);
  param_hooks_.clear();
}

std::string DumpTap::Record(const torch::Tensor& t, const std::string& data_name) {
  // Our own statistics are no ops of the model's: no graph, no autocast.
  torch::NoGradGuard no_grad;
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  torch::Tensor x = t.detach();
  std::string shape = absl::StrJoin(x.sizes(), ", ");
  std::string out = absl::StrCat(
      "{\"type\": \"torch.Tensor\", \"dtype\": \"", DtypeName(x.scalar_type()), "\", \"shape\": [",
      shape, "], ", Stats(x), ", \"requires_grad\": ", t.requires_grad() ? "true" : "false");
  if (options_.mode != "statistics") {
    // Dense row-major on the host, in storage of its own (as msprobe writes every file).
    torch::Tensor dense = x.to(torch::kCPU).contiguous().clone();
    if (options_.mode == "md5") {
      absl::StrAppend(&out, ", \"md5\": \"", Crc32(dense), "\"");
    } else {
      const std::string file = data_name + ".pt";
      std::vector<char> bytes = torch::pickle_save(dense);
      absl::Status st = WriteTensorFile(absl::StrCat(dir_, "/dump_tensor_data/", file), bytes);
      if (st.ok()) {
        absl::StrAppend(&out, ", \"data_name\": ", Quote(file));
      } else {
        failures_.push_back(std::string(st.message()));
      }
    }
  }
  out += "}";
  return out;
}

torch::Tensor DumpTap::In(int site, torch::Tensor x) {
  if (inner_ != nullptr) x = inner_->In(site, std::move(x));
  std::lock_guard<std::mutex> lock(mu_);
  const Site& s = sites_[site];
  if (!active_ || s.prefix.empty()) return x;
  Entry e;
  e.kind = Entry::kForward;
  e.name = s.module ? absl::StrCat(s.prefix, ".forward.", NextIndex(s.prefix + ".forward"))
                    : absl::StrCat(s.prefix, ".", NextIndex(s.prefix), ".forward");
  const int call = static_cast<int>(entries_.size());
  if (x.requires_grad() && torch::GradMode::is_enabled()) {
    // A view of its own, so that its gradient is the one flowing through this call only
    // (the tensor itself may also feed the residual stream).
    x = x.view_as(x);
    x.register_hook([this, call](torch::Tensor g) { OnInputGrad(call, g); });
  }
  e.inputs.push_back(Record(x, e.name + ".input.0"));
  if (!s.module && Leaf(site_names_[site]) == "head") {
    for (const auto& [name, p] : named_) {
      if (name == "wte.weight") e.inputs.push_back(Record(p, e.name + ".input.1"));
    }
  }
  pending_input_[site] = call;
  entries_.push_back(std::move(e));
  backward_of_.push_back(-1);
  forward_site_.push_back(site);
  return x;
}

torch::Tensor DumpTap::Out(int site, torch::Tensor y) {
  if (inner_ != nullptr) y = inner_->Out(site, std::move(y));
  std::lock_guard<std::mutex> lock(mu_);
  const Site& s = sites_[site];
  if (!active_ || s.prefix.empty() || pending_input_[site] < 0) return y;
  const int call = pending_input_[site];
  pending_input_[site] = -1;
  Entry& e = entries_[call];
  e.outputs.push_back(Record(y, e.name + ".output.0"));
  for (int i : s.params) {
    const std::string pname = named_[i].first.substr(site_names_[site].size() + 1);
    e.params.push_back(absl::StrCat(Quote(pname), ": ",
                                    Record(named_[i].second, e.name + ".parameters." + pname)));
  }
  if (y.requires_grad() && torch::GradMode::is_enabled()) {
    y.register_hook([this, call](torch::Tensor g) { OnOutputGrad(call, g); });
  }
  return y;
}

void DumpTap::OnOutputGrad(int call, const torch::Tensor& g) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!active_ || backward_of_[call] >= 0) return;
  const Site& s = sites_[forward_site_[call]];
  Entry e;
  e.kind = Entry::kBackward;
  if (s.module) {
    e.name = absl::StrCat(s.prefix, ".backward.", NextIndex(s.prefix + ".backward"));
  } else {  // "Functional.gelu.3.forward" -> "Functional.gelu.3.backward"
    const std::string& f = entries_[call].name;
    e.name = f.substr(0, f.size() - std::string(".forward").size()) + ".backward";
  }
  e.inputs.push_back(Record(g, e.name + ".input.0"));
  backward_of_[call] = static_cast<int>(entries_.size());
  entries_.push_back(std::move(e));
  backward_of_.push_back(-1);
  forward_site_.push_back(forward_site_[call]);
}

void DumpTap::OnInputGrad(int call, const torch::Tensor& g) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!active_ || backward_of_[call] < 0) return;
  Entry& e = entries_[backward_of_[call]];
  if (e.outputs.empty()) e.outputs.push_back(Record(g, e.name + ".output.0"));
}

void DumpTap::OnParamGrad(size_t index, const torch::Tensor& g) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!active_) return;
  const int site = param_site_[index];
  const Site& s = sites_[site];
  const std::string key = s.prefix + ".parameters_grad";
  const std::string name = absl::StrCat(key, ".", counts_[key]);
  const std::string pname = named_[index].first.substr(site_names_[site].size() + 1);
  std::map<size_t, std::string>& got = grads_[site];
  got[index] = absl::StrCat(Quote(pname), ": [", Record(g, name + "." + pname), "]");
  if (got.size() < s.params.size()) return;
  Entry e;
  e.kind = Entry::kParamGrad;
  e.name = name;
  for (const auto& [i, text] : got) e.params.push_back(text);  // registration order
  NextIndex(key);
  got.clear();
  entries_.push_back(std::move(e));
  backward_of_.push_back(-1);
  forward_site_.push_back(site);
}

absl::Status DumpTap::EndStep(int* written) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_) return absl::OkStatus();
    active_ = false;
  }
  model_->SetTap(inner_);
  UnhookParameters();
  if (!failures_.empty()) {
    return absl::InternalError(absl::StrCat("--dump: step ", step_, ": ", failures_.size(),
                                            " tensor file(s) not written: ", failures_[0]));
  }
  TS_RETURN_IF_ERROR(Write());
  ++*written;
  return absl::OkStatus();
}

absl::Status DumpTap::Write() const {
  TS_RETURN_IF_ERROR(MakeDirs(dir_));
  const bool tensors = options_.mode == "tensor";
  std::string data;
  std::string construct;
  // stack.json: the model site of each forward entry (a C++ model has no Python frames).
  std::map<int, std::vector<std::string>> by_site;
  for (size_t k = 0; k < entries_.size(); ++k) {
    const Entry& e = entries_[k];
    std::string body;
    auto list = [](const std::vector<std::string>& v) {
      return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
    };
    if (e.kind == Entry::kForward) {
      body = absl::StrCat("{\"input_args\": ", list(e.inputs), ", \"input_kwargs\": {}, ",
                          "\"output\": ", list(e.outputs));
      if (sites_[forward_site_[k]].module) {
        absl::StrAppend(&body, ", \"parameters\": {", absl::StrJoin(e.params, ", "), "}");
      }
      body += "}";
      by_site[forward_site_[k]].push_back(e.name);
    } else if (e.kind == Entry::kBackward) {
      body = absl::StrCat("{\"input\": ", list(e.inputs), ", \"output\": ", list(e.outputs), "}");
    } else {
      body = absl::StrCat("{", absl::StrJoin(e.params, ", "), "}");
    }
    absl::StrAppend(&data, data.empty() ? "" : ",\n", "  ", Quote(e.name), ": ", body);
    if (e.kind != Entry::kParamGrad) {
      absl::StrAppend(&construct, construct.empty() ? "" : ",\n", " ", Quote(e.name), ": null");
    }
  }
  const std::string tensor_dir = dir_ + "/dump_tensor_data";
  std::string head =
      absl::StrCat("{\n \"task\": \"", tensors ? "tensor" : "statistics", "\",\n \"level\": \"",
                   options_.level, "\",\n \"framework\": \"pytorch\",\n \"dump_data_dir\": ",
                   tensors ? Quote(tensor_dir) : "null", ",\n \"data\": {\n");
  TS_RETURN_IF_ERROR(WriteFileAtomic(dir_ + "/dump.json", head + data + "\n }\n}\n"));
  std::string stack;
  int group = 0;
  for (const auto& [site, names] : by_site) {
    std::vector<std::string> quoted;
    for (const std::string& n : names) quoted.push_back(Quote(n));
    absl::StrAppend(
        &stack, stack.empty() ? "" : ",\n", " \"", group++, "\": [[", absl::StrJoin(quoted, ", "),
        "], [",
        Quote(absl::StrCat("File src/train/model.cc, in trainscope::train::GptImpl::forward, "
                           "\n model site ",
                           site_names_[site])),
        "]]");
  }
  TS_RETURN_IF_ERROR(WriteFileAtomic(dir_ + "/stack.json", "{\n" + stack + "\n}\n"));
  return WriteFileAtomic(dir_ + "/construct.json", "{\n" + construct + "\n}\n");
}

}  // namespace trainscope::train
