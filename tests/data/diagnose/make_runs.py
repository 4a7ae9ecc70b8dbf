#!/usr/bin/python3
"""Real PyTorch runs with a known cause, for `trainscope diagnose`'s golden tests.

A tiny character-level model (embedding -> MLP over the previous 16 bytes -> next byte) is
trained on real text (the Debian license texts in /usr/share/common-licenses), CPU, torch
1.13 (Debian's python3-torch). Each run changes one thing from the healthy recipe:

  healthy_s1..s3   Adam lr 3e-3, three seeds
  lr_too_low       Adam lr 1e-7: flat from the start                 -> not_learning
  lr_too_high      Adam lr 1.0: explodes, then stuck high            -> unstable
  sgd_diverging    SGD, the LR grows 4.5% a step (a warm-up with no end), no clipping:
                   the loss grows, then turns NaN                    -> diverging (+nan)
  corrupt_batches  healthy, but 4 batches of random bytes            -> loss_spikes
  duplicate_data   train on 3 KB repeated (duplicate-heavy), larger
                   model; val on other text                          -> overfitting
  nan_step_150     healthy, a NaN written into the input embeddings
                   at step 150 (a bad sample): NaN from then on      -> nan_fixed_step
  lr_cut_early     a schedule bug: the LR drops 1e4x at step 60      -> plateau

Each run is written five ways, same numbers:
  <run>.csv                 step,loss,val_loss,lr,grad_norm (val only every 20 steps)
  <run>.jsonl               {"iteration", "train_loss", "eval_loss", "learning_rate", "grad_norm"}
  <run>/trainer_state.json  HuggingFace Trainer layout (log_history; NaN written as NaN)
  <run>.rundir/train/metrics.rank0.jsonl  trainscope's own metrics (trainscope.train_metrics v1)
  <run>.tb/events.out.tfevents.*  TensorBoard events, HF Trainer's tags (train/loss,
                            train/learning_rate, train/grad_norm, eval/loss); scalars as
                            simple_value (PyTorch SummaryWriter's way), as a float tensor with
                            float_val or as a double tensor with tensor_content (TF2's way),
                            in turn over the runs
and two more:
  <run>.megatron.log        a Megatron-LM style log (healthy_s1, nan_step_150): arguments
                            banner, iteration lines, validation blocks; a NaN step is a
                            "number of nan iterations: 1" line without lm loss, as Megatron
                            prints it
  corrupt_crc.tb/           healthy_s2's events with one record's data damaged (bad CRC) and
                            the last record cut short
Neither torch.utils.tensorboard (needs the tensorboard package) nor python3-protobuf is
installed, so the events are encoded here from the public event.proto / summary.proto /
tensor.proto field numbers, framed as TFRecords (length, masked CRC32C, data, masked CRC32C).

Usage: /usr/bin/python3 make_runs.py [OUT_DIR]   (default: this script's folder)
Deterministic for a given torch build (torch.manual_seed, one thread).
"""
import glob, json, math, os, struct, sys

import torch

torch.set_num_threads(1)
CTX, STEPS, BATCH, VAL_EVERY = 16, 300, 128, 20


def corpus():
    files = sorted(glob.glob("/usr/share/common-licenses/*"))
    text = b""
    for f in files:
        if os.path.isfile(f):
            with open(f, "rb") as fh:
                text += fh.read()
    data = torch.tensor(list(text), dtype=torch.long)
    n = len(data)
    return data[: int(n * 0.9)], data[int(n * 0.9):]


class Model(torch.nn.Module):
    def __init__(self, emb=24, hidden=128):
        super().__init__()
        self.emb = torch.nn.Embedding(256, emb)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(CTX * emb, hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(hidden, 256))

    def forward(self, x, poison=False):
        e = self.emb(x)  # (B, CTX, emb)
        if poison:
            e = e.clone()
            e[0, 0, 0] = float("nan")
        return self.mlp(e.flatten(1))


def batch(data, g, size=BATCH):
    ix = torch.randint(0, len(data) - CTX - 1, (size,), generator=g)
    x = torch.stack([data[i:i + CTX] for i in ix])
    y = data[ix + CTX]
    return x, y


def val_loss(model, val, g):
    with torch.no_grad():
        x, y = batch(val, g, 1024)
        return torch.nn.functional.cross_entropy(model(x), y).item()


def run(name, train, val, seed=1, lr=3e-3, opt="adam", corrupt=(), nan_step=None,
        lr_at=None, hidden=128, stop_after_nan=10):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    gv = torch.Generator().manual_seed(1000 + seed)
    model = Model(hidden=hidden)
    if opt == "adam":
        o = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        o = torch.optim.SGD(model.parameters(), lr=lr)
    rows, nan_seen = [], None
    for step in range(1, STEPS + 1):
        cur_lr = lr_at(step) if lr_at else lr
        for pg in o.param_groups:
            pg["lr"] = cur_lr
        x, y = batch(train, g)
        if step in corrupt:
            x = torch.randint(0, 256, x.shape, generator=g)
            y = torch.randint(0, 256, y.shape, generator=g)
        loss = torch.nn.functional.cross_entropy(model(x, poison=(step == nan_step)), y)
        o.zero_grad()
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item()
        o.step()
        lv = loss.item()
        row = {"step": step, "loss": lv, "lr": cur_lr, "grad_norm": gn, "val_loss": None}
        if step % VAL_EVERY == 0:
            row["val_loss"] = val_loss(model, val, gv)
        rows.append(row)
        if not math.isfinite(lv) and nan_seen is None:
            nan_seen = step
        if nan_seen is not None and step >= nan_seen + stop_after_nan:
            break
    return rows


def fmt(v):
    if v is None:
        return ""
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(round(v, 6)) if isinstance(v, float) else str(v)


def jnum(v):
    """A float as Python's json writes it (NaN, Infinity), rounded to 6 significant digits."""
    if v is None or not math.isfinite(v):
        return v
    return float("%.6g" % v)


def write(out, name, rows):
    with open(os.path.join(out, name + ".csv"), "w") as f:
        f.write("step,loss,val_loss,lr,grad_norm\n")
        for r in rows:
            f.write(",".join(fmt(r[k]) if k != "step" else str(r[k])
                             for k in ("step", "loss", "val_loss", "lr", "grad_norm")) + "\n")
    with open(os.path.join(out, name + ".jsonl"), "w") as f:
        for r in rows:
            d = {"iteration": r["step"], "train_loss": jnum(r["loss"]),
                 "learning_rate": jnum(r["lr"]), "grad_norm": jnum(r["grad_norm"])}
            if r["val_loss"] is not None:
                d["eval_loss"] = jnum(r["val_loss"])
            f.write(json.dumps(d) + "\n")
    hist = []
    for r in rows:
        # HF logs a train entry per logging step and a separate eval entry.
        hist.append({"epoch": round(r["step"] / STEPS, 4), "grad_norm": jnum(r["grad_norm"]),
                     "learning_rate": jnum(r["lr"]), "loss": round(r["loss"], 4)
                     if math.isfinite(r["loss"]) else r["loss"], "step": r["step"]})
        if r["val_loss"] is not None:
            hist.append({"epoch": round(r["step"] / STEPS, 4), "eval_loss": jnum(r["val_loss"]),
                         "eval_runtime": 0.1, "eval_samples_per_second": 2560.0,
                         "eval_steps_per_second": 10.0, "step": r["step"]})
    state = {"best_metric": None, "best_model_checkpoint": None, "epoch": 1.0,
             "eval_steps": VAL_EVERY, "global_step": rows[-1]["step"],
             "is_hyper_param_search": False, "is_local_process_zero": True,
             "is_world_process_zero": True, "log_history": hist, "logging_steps": 1,
             "max_steps": STEPS, "num_train_epochs": 1, "save_steps": 500, "total_flos": 0.0,
             "train_batch_size": BATCH, "trial_name": None, "trial_params": None}
    os.makedirs(os.path.join(out, name), exist_ok=True)
    with open(os.path.join(out, name, "trainer_state.json"), "w") as f:
        f.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
    tdir = os.path.join(out, name + ".rundir", "train")
    os.makedirs(tdir, exist_ok=True)
    with open(os.path.join(tdir, "metrics.rank0.jsonl"), "w") as f:
        f.write(json.dumps({"type": "header", "format": "trainscope.train_metrics", "version": 1,
                            "rank": 0, "world_size": 1, "params": 0, "device": "cpu",
                            "precision": "fp32", "tokens_per_step": BATCH}) + "\n")
        for r in rows:
            loss = jnum(r["loss"]) if math.isfinite(r["loss"]) else None  # null if not finite
            f.write(json.dumps({"type": "step", "step": r["step"], "loss": loss,
                                "lr": jnum(r["lr"]), "grad_norm": jnum(r["grad_norm"]),
                                "tokens": BATCH, "step_ms": 1.0}) + "\n")
        end = "error" if not math.isfinite(rows[-1]["loss"]) else "done"
        f.write(json.dumps({"type": "end", "reason": end, "step": rows[-1]["step"], "rank": 0})
                + "\n")


# --- TensorBoard events (protobuf wire format by hand) ---------------------------------

def _varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, wire, payload):
    key = _varint((num << 3) | wire)
    if wire == 0:
        return key + _varint(payload)
    if wire == 2:
        return key + _varint(len(payload)) + payload
    return key + payload  # fixed32 / fixed64: payload already packed


def _crc32c_table():
    t = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t.append(c)
    return t


_CRC_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ _CRC_TABLE[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked_crc(n)) + data + struct.pack("<I", masked_crc(data))


DT_FLOAT, DT_DOUBLE = 1, 2


def summary_value(tag, v, how, first):
    """Summary.Value: tag=1, simple_value=2 (float), tensor=8, metadata=9."""
    out = _field(1, 2, tag.encode())
    if how == "simple":
        return out + _field(2, 5, struct.pack("<f", v))
    if how == "float_val":  # TensorProto: dtype=1, tensor_shape=2 (empty: a scalar), float_val=5
        t = _field(1, 0, DT_FLOAT) + _field(2, 2, b"") + _field(5, 2, struct.pack("<f", v))
    else:  # tensor_content=4, the double's little-endian bytes
        t = _field(1, 0, DT_DOUBLE) + _field(2, 2, b"") + _field(4, 2, struct.pack("<d", v))
    out += _field(8, 2, t)
    if first:  # SummaryMetadata.plugin_data=1 {plugin_name=1, content=2}, as TF2 writes once
        out += _field(9, 2, _field(1, 2, _field(1, 2, b"scalars") + _field(2, 2, b"")))
    return out


def event(step, wall_time, values=None, file_version=None):
    """Event: wall_time=1 (double), step=2, file_version=3, summary=5 {value=1 ...}."""
    out = _field(1, 1, struct.pack("<d", wall_time))
    if step:
        out += _field(2, 0, step)
    if file_version is not None:
        return out + _field(3, 2, file_version.encode())
    return out + _field(5, 2, b"".join(_field(1, 2, v) for v in values))


TB_FILE = "events.out.tfevents.1700000000.make_runs.4242.0"


def tb_records(rows, how):
    recs = [tfrecord(event(0, 1700000000.0, file_version="brain.Event:2"))]
    seen = set()
    for r in rows:
        wall = 1700000000.0 + r["step"] * 0.25
        vals = []
        for tag, key in (("train/loss", "loss"), ("train/learning_rate", "lr"),
                         ("train/grad_norm", "grad_norm")):
            vals.append(summary_value(tag, r[key], how, tag not in seen))
            seen.add(tag)
        recs.append(tfrecord(event(r["step"], wall, vals)))
        if r["val_loss"] is not None:  # HF logs evaluation as its own event
            vals = [summary_value("eval/loss", r["val_loss"], how, "eval/loss" not in seen)]
            seen.add("eval/loss")
            recs.append(tfrecord(event(r["step"], wall + 0.1, vals)))
    return recs


def write_tb(out, name, rows, how):
    d = os.path.join(out, name + ".tb")
    os.makedirs(d, exist_ok=True)
    recs = tb_records(rows, how)
    with open(os.path.join(d, TB_FILE), "wb") as f:
        f.write(b"".join(recs))
    return recs


def write_corrupt_tb(out, recs):
    """One record's data damaged (its CRC no longer matches), the last record cut short."""
    recs = list(recs)
    bad = bytearray(recs[100])
    bad[12 + 20] ^= 0x10
    recs[100] = bytes(bad)
    d = os.path.join(out, "corrupt_crc.tb")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, TB_FILE), "wb") as f:
        f.write(b"".join(recs)[:-7])


# --- Megatron-LM style log --------------------------------------------------------------

MEGATRON_HEAD = """using world size: 1, data-parallel size: 1, context-parallel size: 1, tensor-model-parallel size: 1, pipeline-model-parallel size: 1
------------------------ arguments ------------------------
  global_batch_size ............................... %d
  log_interval .................................... 1
  lr .............................................. %s
  micro_batch_size ................................ %d
  seq_length ...................................... %d
  train_iters ..................................... %d
-------------------- end of arguments ---------------------
> building GPT2BPETokenizer tokenizer ...
> initializing torch distributed ...
> setting random seeds to 1234 ...
building GPT model ...
 > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 44288
[after model, optimizer, and learning rate scheduler are built] datetime: 2024-05-01 12:00:00
training ...
[before the start of training step] datetime: 2024-05-01 12:00:01
"""


def write_megatron(out, name, rows):
    lines = [MEGATRON_HEAD % (BATCH, "%.1E" % rows[0]["lr"], BATCH, CTX, STEPS)]
    for r in rows:
        t = r["step"]
        fields = ["consumed samples: %12d" % (t * BATCH),
                  "elapsed time per iteration (ms): %.1f" % (40.0 + (t * 7919) % 13 / 10),
                  "learning rate: %.6E" % r["lr"], "global batch size: %5d" % BATCH]
        nan = not math.isfinite(r["loss"])
        if not nan:
            fields.append("lm loss: %.6E" % r["loss"])
        fields += ["loss scale: 1.0", "grad norm: %.3f" % r["grad_norm"],
                   "number of skipped iterations: %3d" % 0,
                   "number of nan iterations: %3d" % (1 if nan else 0)]
        lines.append(" [2024-05-01 12:%02d:%02d] iteration %8d/%8d | %s |\n" % (
            t // 60 % 60, t % 60, t, STEPS, " | ".join(fields)))
        if r["val_loss"] is not None:
            rule = "-" * 100 + "\n"
            v = r["val_loss"]
            ppl = math.exp(min(20.0, v)) if math.isfinite(v) else v
            lines.append(rule + " validation loss at iteration %d | lm loss value: %.6E | "
                         "lm loss PPL: %.6E | \n" % (t, v, ppl) + rule)
    with open(os.path.join(out, name + ".megatron.log"), "w") as f:
        f.write("".join(lines))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    train, val = corpus()
    dup = train[:3000]
    runs = {
        "healthy_s1": dict(seed=1),
        "healthy_s2": dict(seed=2),
        "healthy_s3": dict(seed=3),
        "lr_too_low": dict(lr=1e-7),
        "lr_too_high": dict(lr=1.0),
        "sgd_diverging": dict(opt="sgd", lr=0.0, lr_at=lambda s: 0.5 * 1.045 ** s),
        "corrupt_batches": dict(corrupt=(90, 150, 200, 260)),
        "duplicate_data": dict(hidden=512, lr=3e-3, train=dup),
        "nan_step_150": dict(nan_step=150),
        "lr_cut_early": dict(lr=0.0, lr_at=lambda s: 3e-3 if s <= 60 else 3e-7),
    }
    tb_how = ("simple", "float_val", "tensor_content")
    for i, (name, kw) in enumerate(runs.items()):
        t = kw.pop("train", train)
        rows = run(name, t, val, **kw)
        write(out, name, rows)
        recs = write_tb(out, name, rows, tb_how[i % 3])
        if name == "healthy_s2":
            write_corrupt_tb(out, recs)
        if name in ("healthy_s1", "nan_step_150"):
            write_megatron(out, name, rows)
        last = [r for r in rows if r["val_loss"] is not None]
        print("%-16s steps %3d  loss %.3f -> %s  val %s" % (
            name, len(rows), rows[0]["loss"], fmt(rows[-1]["loss"]),
            fmt(last[-1]["val_loss"]) if last else "-"))


if __name__ == "__main__":
    main()
