"""What every real_tools test needs of trainscope: the binary ($TS_BINARY, set by ctest; else
build/bin/trainscope of this checkout) and a run of it that must not crash (exit 0 or 1)."""
import json
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("TS_BINARY", os.path.join(REPO, "build", "bin", "trainscope"))


def run(*args, timeout=60):
    p = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)
    assert p.returncode in (0, 1), f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def run_json(*args):
    p = run(*args, "--json")
    return p.returncode, json.loads(p.stdout)


def gloo_fr_job(tmp, worker_source, prefix, job="job", dumps="dumps"):
    """The folders and environment of a gloo job whose ranks dump torch's Flight Recorder:
    (work dir, dump dir, worker.py path, env). The env drops torchrun's and FR's own variables
    of the caller and sets a 2000-entry buffer dumping to DUMPS/PREFIX<rank>, loopback gloo,
    one thread per rank."""
    work, dump_dir = os.path.join(tmp, job), os.path.join(tmp, dumps)
    os.makedirs(work)
    os.makedirs(dump_dir)
    worker = os.path.join(tmp, "worker.py")
    with open(worker, "w") as f:
        f.write(worker_source)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TORCH_FR_", "TORCH_NCCL_", "MASTER_", "RANK", "WORLD_SIZE"))}
    env.update(TORCH_FR_BUFFER_SIZE="2000", TORCH_FR_DUMP_TEMP_FILE=os.path.join(dump_dir, prefix),
               GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    return work, dump_dir, worker, env
