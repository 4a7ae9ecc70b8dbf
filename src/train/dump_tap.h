// The trainer's op dumps (trainscope/train/dump.h): a model tap that records every module's
// input, output and parameters in forward, the gradients of its outputs and inputs in
// backward, and each parameter's gradient, for the dumped steps only, and writes them in
// msprobe's layout at the step's end. Private to the train module (libtorch).
//
// It wraps the model's other tap (the non-finite guard, or none): that tap sees every call
// first and the dump records what the model continues with. Between BeginStep and EndStep of
// a dumped step it is the model's tap and holds a hook on every parameter; otherwise the
// model runs without it (no cost). Hooks firing on autograd threads are serialized by a mutex.
#ifndef TRAINSCOPE_SRC_TRAIN_DUMP_TAP_H_
#define TRAINSCOPE_SRC_TRAIN_DUMP_TAP_H_

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "train/model.h"
#include "trainscope/train/dump.h"

namespace trainscope::train {

class DumpTap : public ModelTap {
 public:
  // `inner`: the model's tap to keep (not owned; null: none); `named`: the model's parameters
  // in registration order; `root`: <run_dir>/dump. Model and parameters outlive the tap.
  DumpTap(Gpt model, ModelTap* inner, std::vector<std::pair<std::string, torch::Tensor>> named,
          DumpOptions options, int rank, std::string root);
  ~DumpTap() override;
  DumpTap(const DumpTap&) = delete;
  DumpTap& operator=(const DumpTap&) = delete;

  // Start of step `step`: taps the model when the step is one to dump.
  void BeginStep(int step);
  // After the step's last backward: gives the model back its other tap, writes
  // <root>/step<N>/rank<R>/ and adds 1 to *written (nothing when the step is not dumped).
  // Errors: the file system's.
  absl::Status EndStep(int* written);

  torch::Tensor In(int site, torch::Tensor x) override;
  torch::Tensor Out(int site, torch::Tensor y) override;

 private:
  // What a site of the model is in msprobe's names.
  struct Site {
    std::string prefix;       // "Module.blocks.0.ln1.LayerNorm", "Functional.gelu"; "" none
    bool module = false;      // a module entry (else a functional one)
    std::vector<int> params;  // indices into named_ of the module's own parameters
  };
  // One call's records, by JSON text (built as the hooks fire).
  struct Entry {
    enum Kind { kForward, kBackward, kParamGrad } kind = kForward;
    std::string name;
    std::vector<std::string> inputs, outputs, params;  // "key": value (params) or values
  };
  void HookParameters();
  void UnhookParameters();
  void OnOutputGrad(int call, const torch::Tensor& g);
  void OnInputGrad(int call, const torch::Tensor& g);
  void OnParamGrad(size_t index, const torch::Tensor& g);
  std::string Record(const torch::Tensor& t, const std::string& data_name);
  int NextIndex(const std::string& key) { return counts_[key]++; }
  absl::Status Write() const;

  Gpt model_;
  ModelTap* const inner_;
  std::vector<std::pair<std::string, torch::Tensor>> named_;
  const DumpOptions options_;
  const int rank_;
  const std::string root_;
  std::vector<Site> sites_;
  std::vector<std::string> site_names_;
  std::vector<int> param_site_;  // named_ index -> its site (-1: none)

  std::mutex mu_;  // guards everything below (hooks fire on autograd threads)
  bool active_ = false;
  int step_ = 0;
  std::string dir_;                                       // this step's rank folder
  std::vector<std::pair<size_t, unsigned>> param_hooks_;  // (named_ index, hook)
  std::map<std::string, int> counts_;
  std::vector<Entry> entries_;      // in the order they were recorded
  std::vector<int> pending_input_;  // site -> entries_ index of its open forward call
  std::vector<int> backward_of_;    // forward entry -> its backward entry (-1: none yet)
  std::vector<int> forward_site_;   // forward entry -> site
  // Per site: the parameter gradients of its current backward pass, by param index.
  std::map<int, std::map<size_t, std::string>> grads_;
  std::vector<std::string> failures_;  // tensors that could not be saved
};

}  // namespace trainscope::train

#endif  // TRAINSCOPE_SRC_TRAIN_DUMP_TAP_H_
