"""A small model dumped by trainscope.dump or by msprobe's PrecisionDebugger (test_dump*.py).

    dump_job.py --tool ours|msprobe --out DIR [--level mix] [--mode tensor] [--steps 1]
                [--low-precision]

Runs in its own process so that neither tool's hooks reach the test process. --low-precision
runs the model's fc2 under bfloat16 autocast (a planted precision divergence of one module).
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    """fc1 -> LayerNorm -> GELU + residual -> relu -> fc2 (the module a test may run in bf16)."""

    def __init__(self, low_precision=False):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 32)
        self.ln = torch.nn.LayerNorm(32)
        self.fc2 = torch.nn.Linear(32, 4)
        self.low_precision = low_precision

    def forward(self, x):
        h = self.ln(self.fc1(x))
        h = torch.relu(h + F.gelu(h))
        if self.low_precision:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return self.fc2(h)
        return self.fc2(h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", choices=["ours", "msprobe"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--level", default="mix")
    ap.add_argument("--mode", default="tensor")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--low-precision", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Model(args.low_precision)
    x = torch.randn(4, 8)
    if args.tool == "ours":
        import trainscope
        debugger = trainscope.dump(model, args.out, level=args.level, mode=args.mode)
        start = debugger.start
    else:
        from msprobe.pytorch import PrecisionDebugger
        task = "tensor" if args.mode == "tensor" else "statistics"
        summary = "md5" if args.mode == "md5" else "statistics"
        cfg = {"task": task, "dump_path": args.out, "rank": [], "step": [], "level": args.level,
               "async_dump": False, task: {"scope": [], "list": [], "data_mode": ["all"],
                                           "summary_mode": summary}}
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "config.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        debugger = PrecisionDebugger(config_path=path)
        start = lambda: debugger.start(model=model)  # noqa: E731
    for _ in range(args.steps):
        start()
        model(x).float().sum().backward()
        debugger.stop()
        debugger.step()


if __name__ == "__main__":
    main()
