#!/usr/bin/env python3
"""Writes et/rank0_et.json: a PyTorch execution trace (schema 1.1.1-chakra.0.0.4), the
`_et.json` file HTA reads beside a Kineto trace, which `trace analyze` must list as skipped.

Written with torch 2.15.0 (the venv's .venv/bin/python) by ExecutionTraceObserver around one
forward pass of a Linear(4, 2) on CPU: 18 nodes, 17 KB. pid, time and start_ts differ per run.
et/rank0.pt.trace.json is a copy of mixed_dir/rank0.pt.trace.json (the Kineto trace beside it).
"""
import os

import torch
from torch.profiler import ExecutionTraceObserver

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    path = os.path.join(HERE, "et", "rank0_et.json")
    et = ExecutionTraceObserver()
    et.register_callback(path)
    et.start()
    m(x).relu().sum()
    et.stop()
    et.unregister_callback()


if __name__ == "__main__":
    main()
