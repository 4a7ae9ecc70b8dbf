#!/usr/bin/python3
"""A skipped gradient all_reduce in a user's own gloo job leaves evidence (issue 33 part 2).

The job is a plain PyTorch loop as a user writes it: `trainscope.distributed.record()` and
`trainscope.watch()`, gloo, 2 ranks started by `trainscope launch -n 2`, gradients averaged by
hand with `dist.all_reduce`. At step 20 rank 1 skips its gradient all_reduce. Two variants:
  fail  per-parameter all_reduces, then the loss's: rank 1's loss all_reduce meets rank 0's
        first gradient one, gloo's size check kills rank 1 (std::terminate, SIGABRT) and
        rank 0 gets `Connection closed/reset by peer`;
  hang  one flat gradient all_reduce a step and a barrier every 10 steps: rank 1 waits in
        the barrier, rank 0 in the all_reduce, until record()'s watchdog times out.
Both must end by themselves with both ranks' dumps and stacks, and the launcher's verdict (its
stderr, launch.json, hang/analysis.json) must lead with rank 1 skipping all_reduce at step 20
(not the barrier, not rank 0), and the dumps' entries carry the step. A third variant:
  silent  rank 1 all-reduces a copy of its gradients at step 20 and steps with its own: no
        collective fails, the job ends 0, and the weights part from step 20 on; watch's
        replica check (checksum_every=5) must report it at step 20 (last agreement at 15),
        naming rank 1 and the parameters, in both ranks' metrics and as a warning.

Run: .venv/bin/python tests/skipped_collective_test.py --binary build/bin/trainscope
     (PYTHONPATH with the built `trainscope` module). Exit 0 pass, 1 fail, 77 skipped
     (no torch or no trainscope module).
"""
import argparse, json, os, subprocess, sys, tempfile, textwrap, time

JOB = textwrap.dedent("""
    import sys
    import torch, torch.distributed as dist
    import trainscope

    mode = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    trainscope.distributed.record(timeout_s=4)
    mon = trainscope.watch(model, opt, checksum_every=5 if mode == "silent" else 0)
    g = torch.Generator().manual_seed(rank)
    for step in range(1, 26):
        with mon.step(tokens=16):
            x = torch.randn(16, 8, generator=g)
            loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
            opt.zero_grad()
            loss.backward()
            if mode == "silent":
                flat = torch.cat([p.grad.flatten() for p in model.parameters()])
                if rank == 1 and step == 20:  # the bug: the sum goes into a copy
                    dist.all_reduce(flat.clone())
                    flat = flat * world
                else:
                    dist.all_reduce(flat)
                torch.nn.utils.vector_to_parameters(flat / world, [p.grad for p in model.parameters()])
            elif not (rank == 1 and step == 20):  # the bug: rank 1 skips its gradient sync
                if mode == "fail":
                    for p in model.parameters():
                        dist.all_reduce(p.grad)  # GRAD-fail
                        p.grad /= world
                else:
                    flat = torch.cat([p.grad.flatten() for p in model.parameters()])
                    dist.all_reduce(flat)  # GRAD-hang
                    torch.nn.utils.vector_to_parameters(flat / world,
                                                        [p.grad for p in model.parameters()])
            opt.step()
            if mode == "fail":
                avg = loss.detach().clone()
                dist.all_reduce(avg)
                loss = avg / world
            mon.log(loss=loss.item())
        if mode == "hang" and step % 10 == 0:
            dist.barrier()
    mon.close()
    dist.destroy_process_group()
""")
LIMIT_S = 60  # each variant must end by itself well within this


def line_of(marker):
    for i, line in enumerate(JOB.splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(marker)


def run(binary, work, mode):
    run_dir = os.path.join(work, "run_" + mode)
    t0 = time.monotonic()
    p = subprocess.run([binary, "launch", "-n", "2", "-q", "--run-dir", run_dir, "--",
                        sys.executable, os.path.join(work, "user_train.py"), mode],
                       capture_output=True, text=True, timeout=LIMIT_S + 30)
    took = time.monotonic() - t0
    errors = []
    check = lambda ok, what: ok or errors.append(what)  # noqa: E731
    check(p.returncode != 0, "launch exit %d, expected a failure" % p.returncode)
    check(took < LIMIT_S, "took %.1f s" % took)
    for r in (0, 1):
        for name in ("flight_recorder.rank%d.json" % r, "stacks.rank%d.txt" % r):
            check(os.path.exists(os.path.join(run_dir, "hang", name)), "no hang/" + name)
    site = "user_train.py:%d" % line_of("GRAD-" + mode)
    try:
        with open(os.path.join(run_dir, "launch.json")) as f:
            verdict = (json.load(f).get("hang") or {}).get("verdict") or [""]
        with open(os.path.join(run_dir, "hang", "analysis.json")) as f:
            first = json.load(f)["findings"][0]
        with open(os.path.join(run_dir, "hang", "flight_recorder.rank0.json")) as f:
            steps = [e.get("step") for e in json.load(f)["entries"]]
    except (OSError, ValueError, KeyError, IndexError) as e:
        errors.append("no verdict: %s" % e)
        return errors, p
    lead = verdict[0]
    for word in ("rank 1 skipped all_reduce", "at step 20", site):
        check(word in lead, "verdict lacks %r: %s" % (word, lead))
    check("skipped barrier" not in lead and "in barrier" not in lead,
          "verdict blames the barrier: " + lead)
    check(first.get("culprit_ranks") == [1] and first.get("op") == "all_reduce",
          "first finding: %s" % first)
    check(lead in p.stderr, "the launcher did not print the verdict")
    check("hang analysis below" in p.stderr, "the hint does not point at the verdict")
    check(steps and steps[0] == 1 and steps[-1] == 20, "rank 0's steps: %s" % steps[-3:])
    return errors, p


def outlier_rule():
    """The replica check's reference value: the most common one (ties: the lowest rank's)."""
    import torch
    from trainscope.replicas import ReplicaCheck
    got = ReplicaCheck._outliers(torch.tensor([[1.0, 2.0], [1.0, 3.0], [1.0, 2.0]], dtype=torch.float64))
    tie = ReplicaCheck._outliers(torch.tensor([[1.0, float("nan")], [2.0, float("nan")]], dtype=torch.float64))
    return [] if got == ([1], [1]) and tie == ([1], [0]) else ["outliers: %s, tie: %s" % (got, tie)]


def run_silent(binary, work):
    run_dir = os.path.join(work, "run_silent")
    p = subprocess.run([binary, "launch", "-n", "2", "-q", "--run-dir", run_dir, "--",
                        sys.executable, os.path.join(work, "user_train.py"), "silent"],
                       capture_output=True, text=True, timeout=LIMIT_S + 30)
    errors = outlier_rule()
    check = lambda ok, what: ok or errors.append(what)  # noqa: E731
    check(p.returncode == 0, "launch exit %d, expected 0 (no collective fails)" % p.returncode)
    for r in (0, 1):
        path = os.path.join(run_dir, "train", "metrics.rank%d.jsonl" % r)
        try:
            with open(path) as f:
                recs = [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError) as e:
            errors.append("rank %d metrics: %s" % (r, e))
            continue
        div = [x for x in recs if x.get("type") == "replica_divergence"]
        check(len(div) == 1, "rank %d: %d replica_divergence records" % (r, len(div)))
        if div:
            d = div[0]
            check(d["step"] == 20 and d["last_agreeing_step"] == 15 and d["ranks"] == [1],
                  "rank %d record: %s" % (r, d))
            check(d["parameters_differing"] == 4 and "0.weight" in d["parameters"],
                  "rank %d parameters: %s" % (r, d))
    logs = ""
    for r in (0, 1):  # `launch -q` keeps each rank's stderr in RUN/rank<R>/stderr.log
        try:
            with open(os.path.join(run_dir, "rank%d" % r, "stderr.log")) as f:
                logs += f.read()
        except OSError:
            pass
    check("replicas diverged: at step 20 rank(s) 1" in logs and "user_train.py" in logs,
          "no divergence warning at the user's line: " + logs[-600:])
    return errors, p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--keep", help="work directory to keep")
    a = ap.parse_args()
    probe = subprocess.run([sys.executable, "-c", "import torch.distributed, trainscope._core"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("skipped: no torch or trainscope module: " + probe.stderr.strip()[-200:])
        return 77
    work = a.keep or tempfile.mkdtemp(prefix="ts-skipped-")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "user_train.py"), "w") as f:
        f.write(JOB)
    failed = False
    for mode in ("fail", "hang"):
        errors, p = run(os.path.abspath(a.binary), work, mode)
        print("%s: %s" % (mode, "ok" if not errors else "FAILED"))
        for e in errors:
            print("  " + e)
        if errors:
            failed = True
            print(textwrap.indent(p.stderr[-3000:], "  | "))
    errors, p = run_silent(os.path.abspath(a.binary), work)
    print("silent: %s" % ("ok" if not errors else "FAILED"))
    for e in errors:
        print("  " + e)
    if errors:
        failed = True
        print(textwrap.indent(p.stderr[-3000:], "  | "))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
