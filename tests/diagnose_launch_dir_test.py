#!/usr/bin/python3
"""`trainscope diagnose` on the run directory of a real `trainscope launch` job (issue 33
part 6): the launcher's own files (rank<R>/stdout.log and stderr.log, launch.json, LOCK) are
known, so they are read when they hold a log format diagnose parses (rank 0 prints Megatron-LM
iteration lines after a preamble longer than the 4 KiB a file's kind is told from) and counted
under `not_needed` otherwise, never listed as skipped; a file of unknown kind in the same
directory still is.

  diagnose_launch_dir_test.py --binary build/bin/trainscope
Exit 0 when all checks hold; else prints each failed check and exits 1.
"""
import argparse, json, os, subprocess, sys, tempfile

SCRIPT = r"""
echo "starting rank $RANK of $WORLD_SIZE"
if [ "$RANK" = 0 ]; then
  i=0
  while [ $i -lt 120 ]; do echo "  setting up: argument_$i ........................ value"; i=$((i+1)); done
  i=1
  while [ $i -le 30 ]; do
    echo " iteration $i/30 | consumed samples: $((i*8)) | learning rate: 1.000000E-04 | global batch size: 8 | lm loss: $((9 - i/5)).5 | loss scale: 1.0 | number of skipped iterations: 0 | number of nan iterations: 0 |"
    i=$((i+1))
  done
fi
echo "rank $RANK done" >&2
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    a = ap.parse_args()
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        script = os.path.join(tmp, "train.sh")
        with open(script, "w") as f:
            f.write(SCRIPT)
        p = subprocess.run([a.binary, "launch", "-n", "2", "-q", "--run-dir", run, "--", "sh", script],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 0, f"launch exit {p.returncode}: {p.stderr}")
        with open(os.path.join(run, "notes.bin"), "wb") as f:
            f.write(b"\x00\x01 not a log")
        d = subprocess.run([a.binary, "diagnose", run, "--json"], capture_output=True, text=True,
                           timeout=60)
        check(d.returncode == 0, f"diagnose exit {d.returncode}: {d.stderr}")
        out = json.loads(d.stdout)
        skipped = [os.path.relpath(s["path"], run) for s in out["skipped"]]
        runs = [os.path.relpath(r["path"], run) for r in out["runs"]]
        check(skipped == ["notes.bin"], f"skipped: {skipped} (want only notes.bin)")
        check(runs == [os.path.join("rank0", "stdout.log")], f"runs: {runs}")
        check(out["runs"] and out["runs"][0]["format"] == "megatron_log"
              and out["runs"][0]["loss_points"] == 30, f"rank 0's log as read: {out['runs']}")
        check(out["not_needed"] == {"logs": 3, "lock": 1, "trainscope.launch": 1},
              f"not_needed: {out['not_needed']}")
        t = subprocess.run([a.binary, "diagnose", run], capture_output=True, text=True, timeout=60)
        check("Not needed: 1 run-directory lock, 3 logs, 1 trainscope.launch document" in t.stdout,
              f"text report: {t.stdout}")
        listed = t.stdout.split("\nSkipped (", 1)[-1].split("\n\n", 1)[0]
        check("Skipped (1)" in t.stdout and ".log" not in listed and "notes.bin" in listed,
              f"the text report's skipped files: {listed}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
