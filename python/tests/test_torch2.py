"""trainscope on torch 2.x's data parallelism: DDP and FSDP2 (`fully_shard`, DTensor parameters)
as 2-process gloo jobs on the CPU (torch2_job.py), each compared with the same model trained
in this process on the whole batch (what both must compute).

- training: watch's metrics (losses per rank, the global grad norm and per-layer norms the same
  on both ranks), the collectives record() saw (DDP's bucket all-reduces, FSDP2's all-gathers
  and reduce-scatters), and checkpoint.save of DDP's and FSDP2's state dicts (DTensor shards
  gathered; a get_model_state_dict full state) verified by `trainscope ckpt verify` and loaded
  back equal;
- the NaN tracer: a NaN in layer2's forward on rank 1 is named there (step, module, phase), and
  rank 0 says it came from another rank;
- a hang: rank 1 skips a step, the watchdog dumps both ranks, `hang analyze` names rank 1 and
  the op.

The six jobs' ranks are forked from one process that imported torch2_job (torch, trainscope)
once (fork_launch.py): 12 torch imports, and torch._dynamo's (DDP and FSDP2 import it on first
use), were about half of this file's time.
"""
import json
import os
import subprocess

import pytest
import torch

import trainscope
from conftest import HERE, trainscope_binary
from fork_launch import ForkLauncher
import torch2_job as job

JOB = os.path.join(HERE, "torch2_job.py")
KINDS = ["ddp", "fsdp2"]


def needs(kind):
    try:
        import torch.distributed.checkpoint.state_dict  # noqa: F401 - torch 2.x's state-dict API
    except ImportError:
        pytest.skip("torch %s has no torch.distributed.checkpoint.state_dict" % torch.__version__)
    if kind == "fsdp2" and job.fully_shard_fn() is None:
        pytest.skip("torch %s has no FSDP2 fully_shard" % torch.__version__)


def site(marker):
    """'torch2_job.py:<line>' of the line of torch2_job.py that carries marker."""
    with open(JOB) as f:
        for i, line in enumerate(f, 1):
            if line.rstrip().endswith("# " + marker):
                return "torch2_job.py:%d" % i
    raise AssertionError("no %s in torch2_job.py" % marker)


@pytest.fixture(scope="module")
def launcher():
    # What DDP, FSDP2 and the state-dict API import on first use, once for all jobs.
    with ForkLauncher(JOB, preload=["torch._dynamo", "torch.distributed.checkpoint.state_dict",
                                    "torch.distributed.fsdp"]) as fl:
        yield fl


@pytest.fixture(scope="module")
def reference():
    """The job's model trained here on each step's whole batch (both ranks' halves): the mean
    loss's gradient is the average of the ranks' gradients, which DDP and FSDP2 apply. Per step:
    each half's loss, the grad norm, per-parameter norms, and the state after steps 3 and 6."""
    net = job.new_net()
    opt = job.optimizer(net.parameters())
    ref = {"loss": {0: [], 1: []}, "grad_norm": [], "layers": {}, "model": {}, "momentum": {}}
    for step in range(1, job.STEPS + 1):
        halves = [job.batch(step, r) for r in (0, 1)]
        x = torch.cat([h[0] for h in halves])
        y = torch.cat([h[1] for h in halves])
        with torch.no_grad():
            for r, (xr, yr) in enumerate(halves):
                ref["loss"][r].append(float(torch.nn.functional.mse_loss(net(xr), yr)))
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        grads = [p.grad for p in net.parameters()]
        ref["grad_norm"].append(float(torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g) for g in grads]))))
        ref["layers"][step] = [(n, float(p.detach().norm()), float(p.grad.norm()))
                               for n, p in net.named_parameters()]
        opt.step()
        ref["model"][step] = {k: v.clone() for k, v in net.state_dict().items()}
        ref["momentum"][step] = [opt.state[p]["momentum_buffer"].clone()
                                 for p in net.parameters()]
    return ref


def read_metrics(run_dir, rank):
    with open(os.path.join(run_dir, "train", "metrics.rank%d.jsonl" % rank)) as f:
        return [json.loads(line) for line in f]


def read_dump(run_dir, rank):
    with open(os.path.join(run_dir, "hang", "flight_recorder.rank%d.json" % rank)) as f:
        return json.load(f)["entries"]


def close(a, b, rel=1e-4, abs_=1e-6):
    return a == pytest.approx(b, rel=rel, abs=abs_)


def check_metrics(run_dir, ref):
    grad_norms = []
    for rank in (0, 1):
        recs = read_metrics(run_dir, rank)
        header = recs[0]
        assert (header["rank"], header["world_size"]) == (rank, 2)
        assert header["config"]["model"] == "Net", header["config"]  # not FSDP2's FSDPNet
        assert header["params"] == sum(p.numel() for p in job.new_net().parameters())
        steps = [r for r in recs if r["type"] == "step"]
        assert [r["step"] for r in steps] == list(range(1, job.STEPS + 1))
        losses = [r["loss"] for r in steps]
        assert close(losses, ref["loss"][rank]), (rank, losses, ref["loss"][rank])
        grad_norms.append([r["grad_norm"] for r in steps])
        # Per-parameter norms under the user's names, of the full tensors (not a shard's).
        layers = {r["step"]: r["layers"] for r in recs if r["type"] == "layer_norms"}
        assert sorted(layers) == [1, 3, 6], layers.keys()
        for step, got in layers.items():
            assert [(e["name"], e["weight_norm"], e["grad_norm"]) for e in got] == [
                (n, pytest.approx(w, rel=1e-4), pytest.approx(g, rel=1e-4))
                for n, w, g in ref["layers"][step]], (rank, step, got)
        assert recs[-1]["type"] == "end" and recs[-1]["reason"] == "done", recs[-1]
    # The global gradient norm: the same on both ranks (DDP all-reduces the gradients, FSDP2's
    # norm is of the full gradients), and the reference's.
    assert grad_norms[0] == pytest.approx(grad_norms[1], rel=1e-6)
    assert close(grad_norms[0], ref["grad_norm"]), (grad_norms[0], ref["grad_norm"])


def check_recorder(kind, run_dir):
    sites = {m: site(m) for m in ("BACKWARD-LINE", "NET-FORWARD", "SAVE-LINE", "SAVE-FULL-LINE")}
    dumps = [read_dump(run_dir, rank) for rank in (0, 1)]
    for entries in dumps:
        assert all(e["state"] == "completed" for e in entries), entries
        by = {}
        for e in entries:
            key = (e["profiling_name"], e["caller"])
            by[key] = by.get(key, 0) + 1
        # checkpoint.save: the ranks compare their DTensor keys, rank 0 writes, all meet.
        for s in (sites["SAVE-LINE"], sites["SAVE-FULL-LINE"]):
            assert by.pop(("gloo:all_gather", s)) == 1 and by.pop(("gloo:barrier", s)) == 1
        if kind == "ddp":  # one bucket per step, through watch's comm hook
            assert by == {("gloo:all_reduce", sites["BACKWARD-LINE"]): job.STEPS}, by
        else:
            # FSDP2 on torch 2.15: dist.all_gather_single before each of the three sharded
            # layers' forward (called from Net.forward), again in backward for the resharded
            # ones, and dist.reduce_scatter_single of each layer's gradients.
            assert by.pop(("gloo:all_gather", sites["NET-FORWARD"])) == 3 * job.STEPS, by
            assert by.pop(("gloo:reduce_scatter", sites["BACKWARD-LINE"])) == 3 * job.STEPS, by
            assert set(by) <= {("gloo:all_gather", sites["BACKWARD-LINE"])}, by
            rs = [e for e in entries if e["profiling_name"] == "gloo:reduce_scatter"]
            # input = the ranks' padded shards: output x 2 (counted from output=, input=).
            assert all(e["input_sizes"][0][0] == 2 * e["output_sizes"][0][0] for e in rs), rs
    seq = [[(e["profiling_name"], e["collective_seq_id"], e["input_sizes"]) for e in d]
           for d in dumps]
    assert seq[0] == seq[1]  # the same collectives in the same order on both ranks
    p = subprocess.run([trainscope_binary(), "hang", "analyze", run_dir, "--json"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["problem"] is False


def check_checkpoints(kind, run_dir, ref):
    ckpts = os.path.join(run_dir, "checkpoints")
    p = subprocess.run([trainscope_binary(), "ckpt", "verify", ckpts], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "step-3" in p.stdout and "step-6" in p.stdout, p.stdout
    strip = lambda d: {k[len("module."):] if k.startswith("module.") else k: v  # noqa: E731
                       for k, v in d.items()}
    for step in (3, job.STEPS):
        ck = trainscope.checkpoint.load(os.path.join(ckpts, "step-%d" % step),
                                        restore_rng=False)
        assert ck.step == step
        model = strip(ck.state["model"])
        assert sorted(model) == sorted(ref["model"][step])
        for k, v in model.items():
            assert type(v) is torch.Tensor and v.shape == ref["model"][step][k].shape, k
            torch.testing.assert_close(v, ref["model"][step][k], rtol=1e-4, atol=1e-6)
    # Step 3 holds the optimizer's state dict too: FSDP2's momentum buffers are DTensors.
    state = trainscope.checkpoint.load(os.path.join(ckpts, "step-3"), restore_rng=False).state
    for i, want in enumerate(ref["momentum"][3]):
        torch.testing.assert_close(state["optimizer"]["state"][i]["momentum_buffer"], want,
                                   rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_training_is_recorded_and_checkpointed(kind, run_dir, reference, launcher):
    needs(kind)
    results = launcher.launch(["train", kind, run_dir], timeout_s=60)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, "rank %d: rc %d\n%s" % (rank, rc, err)
        # The job loaded both checkpoints back (equal to the model's state when saved) and
        # restored a fresh model of its kind from each (set_model_state_dict for FSDP2).
        # With FSDP2 it also saw a save refused on both ranks (an Error naming the key, not a
        # hang) where rank 1's state had none of rank 0's DTensors.
        checks = json.loads(out.strip().splitlines()[-1])["checks"]
        want = {"loaded_3": True, "restored_3": True, "loaded_6": True, "restored_6": True}
        if kind == "fsdp2":
            want["mismatch_refused"] = True
        assert checks == want, (rank, checks)
    check_metrics(run_dir, reference)
    check_recorder(kind, run_dir)
    check_checkpoints(kind, run_dir, reference)


@pytest.mark.parametrize("kind", KINDS)
def test_nan_in_one_ranks_forward_is_named(kind, run_dir, launcher):
    # Rank 1's layer2 output turns NaN at step 3; the gradient reduction (DDP's all-reduce,
    # FSDP2's reduce-scatter) spreads it, so both ranks raise at step 3 in opt.step(). Rank 1
    # names its module by the user's path; rank 0 finds its own forward (FSDP2) or its own
    # gradients before the all-reduce (DDP) finite.
    needs(kind)
    results = launcher.launch(["nan", kind, run_dir], timeout_s=60)
    seen = []
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 3, "rank %d: rc %d\n%s" % (rank, rc, err)
        seen.append(json.loads(out.strip().splitlines()[-1]))
    assert seen[1] == {"step": job.NAN_STEP, "rank": 1, "phase": "forward", "module": "layer2",
                       "parameter": "", "from_other_rank": False}
    assert seen[0] == {"step": job.NAN_STEP, "rank": 0, "phase": "backward", "module": "",
                       "parameter": "", "from_other_rank": True}
    recs = [read_metrics(run_dir, rank) for rank in (0, 1)]
    nf = [[r for r in rs if r["type"] == "nonfinite"] for rs in recs]
    assert [len(n) for n in nf] == [1, 1], nf
    assert nf[1][0]["module"] == "layer2" and nf[1][0]["reproducible"] is True, nf[1]
    if kind == "fsdp2":  # the ranks exchanged whose forward turned non-finite
        assert nf[0][0]["source_ranks"] == [1], nf[0]
        assert "came from rank 1" in recs[0][-1]["error"], recs[0][-1]
    for rank in (0, 1):
        assert recs[rank][-1]["type"] == "end" and recs[rank][-1]["reason"] == "error"
        assert "at step %d on rank %d" % (job.NAN_STEP, rank) in recs[rank][-1]["error"]


@pytest.mark.parametrize("kind", KINDS)
def test_skipped_step_hang_is_named(kind, run_dir, launcher):
    # Rank 1 sleeps instead of step 4; rank 0 waits in DDP's bucket all-reduce (backward) or
    # in FSDP2's first all-gather of the forward. After 3 s the watchdog has both ranks dump.
    needs(kind)
    results = launcher.launch(["hang", kind, run_dir], timeout_s=40)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 1, "rank %d: rc %d\n%s" % (rank, rc, err)
        assert "not reached" not in out
        assert os.path.exists(os.path.join(run_dir, "hang", "flight_recorder.rank%d.json" % rank))
        assert os.path.exists(os.path.join(run_dir, "hang", "stacks.rank%d.txt" % rank))
    op, where = {"ddp": ("all_reduce", "HANG-BACKWARD-LINE"),
                 "fsdp2": ("all_gather", "NET-FORWARD")}[kind]
    # The op rank 0 waits in is the first one of step 4: rank 1 completed all of steps 1-3
    # (DDP: one all-reduce a step; FSDP2 on torch 2.15: 9, the all-gathers and reduce-scatters
    # of three sharded layers).
    done = read_dump(run_dir, 1)
    assert done and all(e["state"] == "completed" for e in done), done
    assert len(done) % (job.SKIP_STEP - 1) == 0, done
    seq = len(done) + 1
    if kind == "ddp":
        assert seq == job.SKIP_STEP
    assert "rank 0: %s #%d at %s not completed" % (op, seq, site(where)) in results[0][2], \
        results[0][2]
    p = subprocess.run([trainscope_binary(), "hang", "analyze", run_dir, "--json"],
                       capture_output=True, text=True)
    assert p.returncode == 1, p.stdout + p.stderr
    verdict = json.loads(p.stdout)
    assert verdict["problem"], verdict
    first = verdict["findings"][0]
    assert (first["culprit_ranks"], first["op"], first["collective_seq_id"]) == ([1], op, seq), \
        first
    assert first["caller"] == site(where), first
    assert "rank 1 never joined %s #%d" % (op, seq) in first["sentence"], first["sentence"]
