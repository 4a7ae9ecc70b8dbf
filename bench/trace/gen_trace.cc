// Writes a realistic Kineto (PyTorch profiler) Chrome trace of about --bytes bytes, laid out as
// Kineto writes it (one key group per line): per step a ProfilerStep#N annotation, nested cpu_op
// operators (forward, backward, optimizer) with Input Dims, cudaLaunchKernel runtime events,
// compute kernels on stream 7 and NCCL all-reduce kernels on stream 20 (overlapping backward),
// memcpys, ac2g flow pairs and a few python_function events.
//   gen_trace --bytes 1000000000 --out /tmp/big.pt.trace.json [--rank 0]
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct Writer {
  FILE* f;
  uint64_t bytes = 0;
  uint64_t events = 0;
  bool first = true;
  char buf[2048];
  void Event(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (!first) {
      fputs(",\n", f);
      bytes += 2;
    }
    first = false;
    fwrite(buf, 1, n, f);
    bytes += n;
    ++events;
  }
};

const char* kFwdOps[] = {"aten::linear",  "aten::layer_norm", "aten::gelu",   "aten::add",
                         "aten::dropout", "aten::softmax",    "aten::matmul", "aten::view"};
const char* kKernels[] = {
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >",
    "ampere_sgemm_128x64_tn",
    "void cunn_SoftMaxForward<4, float, float>"};

}  // namespace

int main(int argc, char** argv) {
  uint64_t target = 1000000000ull;
  const char* out = nullptr;
  int rank = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
      target = strtoull(argv[++i], nullptr, 10);
    else if (!strcmp(argv[i], "--out") && i + 1 < argc)
      out = argv[++i];
    else if (!strcmp(argv[i], "--rank") && i + 1 < argc)
      rank = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: gen_trace --bytes N --out FILE [--rank R]\n");
      return 2;
    }
  }
  if (!out) {
    fprintf(stderr, "usage: gen_trace --bytes N --out FILE [--rank R]\n");
    return 2;
  }
  FILE* f = fopen(out, "w");
  if (!f) {
    perror(out);
    return 2;
  }
  static char iobuf[1 << 20];
  setvbuf(f, iobuf, _IOFBF, sizeof(iobuf));
  fprintf(f,
          "{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [\n    {\"id\": 0, \"name\": "
          "\"NVIDIA H100 80GB HBM3\", \"totalGlobalMem\": 85028896768, \"numSms\": 132}\n  ],\n"
          "  \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": %d, \"world_size\": 8},\n"
          "  \"traceEvents\": [\n",
          rank);
  Writer w{f};
  w.Event(
      "  {\"name\": \"process_labels\", \"ph\": \"M\", \"ts\": 0, \"pid\": 0, \"tid\": 0, "
      "\"args\": {\"labels\": \"GPU 0\"}}");
  w.Event(
      "  {\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": 0, \"tid\": 7, \"args\": "
      "{\"name\": \"stream 7 \"}}");
  const int pid = 4242, tid = 4242;
  uint64_t ext = 1, corr = 100000;
  double ts = 1700000000000.0;  // us
  double gpu_free = ts;         // stream 7 busy until
  int step = 0;
  srand(1);
  while (w.bytes < target) {
    double step_start = ts;
    int ops = 400;
    w.Event(
        "  {\n    \"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#%d\", "
        "\"pid\": %d, \"tid\": %d,\n    \"ts\": %.3f, \"dur\": %.3f,\n    \"args\": {\n      "
        "\"External id\": %" PRIu64 ", \"Record function id\": 0, \"Ev Idx\": %" PRIu64
        "\n    }\n  }",
        step, pid, tid, ts, ops * 3 * 42.0 + 900.0, ext++, w.events);
    ts += 1.0;
    w.Event(
        "  {\n    \"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": "
        "\"enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__\", \"pid\": %d, \"tid\": "
        "%d,\n    \"ts\": %.3f, \"dur\": %.3f,\n    \"args\": {\n      \"External id\": %" PRIu64
        ", \"Record function id\": 0, \"Ev Idx\": %" PRIu64 "\n    }\n  }",
        pid, tid, ts, 800.0, ext++, w.events);
    ts += 801.0;
    for (int phase = 0; phase < 3; ++phase) {  // forward, backward, optimizer
      for (int k = 0; k < ops; ++k) {
        const char* op = phase == 2 ? "aten::_foreach_add_" : kFwdOps[k % 8];
        char bwd[128];
        if (phase == 1) {
          snprintf(bwd, sizeof(bwd), "autograd::engine::evaluate_function: %sBackward0",
                   k % 2 ? "Addmm" : "NativeLayerNorm");
          op = bwd;
        }
        double dur = 40.0;
        w.Event(
            "  {\n    \"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"%s\", \"pid\": %d, \"tid\": "
            "%d,\n    \"ts\": %.3f, \"dur\": %.3f,\n    \"args\": {\n      \"External id\": "
            "%" PRIu64
            ",\"Record function id\": 0, \"Sequence number\": %d, \"Fwd thread id\": 0, \"Ev "
            "Idx\": %" PRIu64
            ", \"Input Dims\": [[16, %d, 4096], [4096, 4096], []], \"Input type\": "
            "[\"c10::BFloat16\", \"c10::BFloat16\", \"\"]\n    }\n  }",
            op, pid, tid, ts, dur, ext, k, w.events, 512 + (k % 4) * 128);
        double lts = ts + 10.0;
        w.Event(
            "  {\n    \"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", "
            "\"pid\": %d, \"tid\": %d,\n    \"ts\": %.3f, \"dur\": %.3f,\n    \"args\": {\n      "
            "\"External id\": %" PRIu64 ", \"cbid\": 211, \"correlation\": %" PRIu64 "\n    }\n  }",
            pid, tid, lts, 6.5, ext, corr);
        w.Event("  {\n    \"ph\": \"s\", \"id\": %" PRIu64
                ", \"pid\": %d, \"tid\": %d, \"ts\": %.3f,\n    \"cat\": \"ac2g\", \"name\": "
                "\"ac2g\"\n  }",
                corr, pid, tid, lts);
        double kstart = std::max(gpu_free, lts + 8.0);
        double kdur = 20.0 + (rand() % 40);
        w.Event(
            "  {\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"%s\", \"pid\": 0, \"tid\": "
            "7,\n    \"ts\": %.3f, \"dur\": %.3f,\n    \"args\": {\n      \"External id\": %" PRIu64
            ", \"queued\": 0, \"device\": 0, \"context\": 1, \"stream\": 7, \"correlation\": "
            "%" PRIu64
            ", \"registers per thread\": 128, \"shared memory\": 0, \"blocks per SM\": 0.5, "
            "\"warps per SM\": 4.0, \"grid\": [66, 1, 1], \"block\": [256, 1, 1], \"est. achieved "
            "occupancy %%\": 25\n    }\n  }",
            kKernels[k % 6], kstart, kdur, ext, corr);
        w.Event("  {\n    \"ph\": \"f\", \"id\": %" PRIu64
                ", \"pid\": 0, \"tid\": 7, \"ts\": %.3f,\n    \"cat\": \"ac2g\", \"name\": "
                "\"ac2g\", \"bp\": \"e\"\n  }",
                corr, kstart);
        gpu_free = kstart + kdur;
        ++corr;
        if (phase == 1 && k % 50 == 49) {  // a gradient bucket all-reduce overlapping backward
          w.Event(
              "  {\n    \"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"record_param_comms\", "
              "\"pid\": %d, \"tid\": %d,\n    \"ts\": %.3f, \"dur\": %.3f,\n    \"args\": {\n      "
              "\"External id\": %" PRIu64
              ", \"Collective name\": \"allreduce\", \"In msg nelems\": 6637568, \"Out msg "
              "nelems\": 6637568, \"Group size\": 8, \"dtype\": \"BFloat16\", \"Process Group "
              "Name\": \"0\", \"Process Group Description\": \"default_pg\", \"Process Group "
              "Ranks\": \"[0, 1, 2, 3, 4, 5, 6, 7]\"\n    }\n  }",
              pid, tid, ts + 30.0, 8.0, ext);
          w.Event(
              "  {\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": "
              "\"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)\", "
              "\"pid\": 0, \"tid\": 20,\n    \"ts\": %.3f, \"dur\": %.3f,\n    \"args\": {\n      "
              "\"External id\": %" PRIu64
              ", \"queued\": 0, \"device\": 0, \"context\": 1, \"stream\": 20, \"correlation\": "
              "%" PRIu64
              ", \"Collective name\": \"allreduce\", \"In msg nelems\": 6637568, \"Out msg "
              "nelems\": 6637568, \"Group size\": 8, \"dtype\": \"BFloat16\"\n    }\n  }",
              gpu_free - 500.0, 1500.0, ext, corr++);
        }
        if (k % 100 == 0) {
          w.Event(
              "  {\n    \"ph\": \"X\", \"cat\": \"gpu_memcpy\", \"name\": \"Memcpy HtoD (Pinned -> "
              "Device)\", \"pid\": 0, \"tid\": 7,\n    \"ts\": %.3f, \"dur\": %.3f,\n    \"args\": "
              "{\n      \"device\": 0, \"context\": 1, \"stream\": 7, \"correlation\": %" PRIu64
              ", \"bytes\": 1048576, \"memory bandwidth (GB/s)\": 24.5\n    }\n  }",
              gpu_free, 42.0, corr++);
          gpu_free += 42.0;
          w.Event(
              "  {\n    \"ph\": \"X\", \"cat\": \"python_function\", \"name\": "
              "\"torch/nn/modules/module.py(1501): _call_impl\", \"pid\": %d, \"tid\": %d,\n    "
              "\"ts\": %.3f, \"dur\": %.3f,\n    \"args\": {\n      \"Python parent id\": 1, "
              "\"Python id\": 2, \"Python thread\": 0\n    }\n  }",
              pid, tid, ts, 41.0);
        }
        ++ext;
        ts += 42.0;
      }
    }
    ts = std::max(ts, step_start + ops * 3 * 42.0 + 900.0) + 5.0;
    ++step;
  }
  fprintf(f,
          "\n  ],\n  \"traceName\": \"%s\",\n  \"displayTimeUnit\": \"ms\",\n  "
          "\"baseTimeNanoseconds\": 1700000000000000000\n}\n",
          out);
  if (fclose(f) != 0) {
    perror(out);
    return 1;
  }
  fprintf(stderr, "gen_trace: %s: %" PRIu64 " bytes, %" PRIu64 " events, %d steps\n", out, w.bytes,
          w.events, step);
  return 0;
}
