#!/usr/bin/python3
"""Python PyTorch peer of `trainscope train`: the same GPT, data order and hyperparameters,
read from the resolved config the C++ trainer writes (<run_dir>/train/config.json).

Same: byte tokenizer (ids 0..255, 256 = end of document), packing (sequence i is
tokens[i*T : i*T+T+1]), splitmix64 Fisher-Yates shuffle per epoch, rank-0 batches, model
(pre-LN GPT, GELU MLP, tied head, GPT-2 init), AdamW with decay on Linear matrices only,
warm-up + cosine LR, global-norm clipping, grads set to None after each step, thread count.
Initial weights: the same too, for a tied head (both draw from the CPU generator seeded with
train.seed, in the same order), so the first steps agree tensor by tensor within fp32 noise
(tests/train_peer_test.py); an untied head is drawn at another point of the stream.

Prints one JSON object: losses, step_ms per step, tokens_per_s (steps after the first).
--weights-out FILE also saves every parameter after the last step (torch.save of a dict
name -> tensor, the names the C++ trainer uses)."""
import argparse, json, math, os, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def shuffled_order(n, seed, epoch):
    order = list(range(n))
    state = (seed ^ ((epoch * 0x9E3779B97F4A7C15) & MASK64)) & MASK64
    for i in range(n - 1, 0, -1):
        state, r = splitmix64(state)
        j = r % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def load_corpus(cfg):
    files = []
    for p in cfg["data"]["corpus"]:
        if os.path.isdir(p):
            inner = sorted(os.path.join(p, f) for f in os.listdir(p)
                           if not os.path.islink(os.path.join(p, f)) and os.path.isfile(os.path.join(p, f)))
            files += inner
        else:
            files.append(p)
    tokens = []
    fmt = cfg["data"]["format"]
    for f in files:
        data = open(f, "rb").read()
        jsonl = fmt == "jsonl" or (fmt == "auto" and f.endswith((".jsonl", ".json", ".ndjson")))
        docs = []
        if jsonl:
            for line in data.split(b"\n"):
                try:
                    obj = json.loads(line)
                    docs.append(obj[cfg["data"]["text_field"]].encode())
                except Exception:
                    pass
        else:
            docs.append(data)
        for d in docs:
            if d:
                tokens.extend(d)
                tokens.append(256)
    return torch.tensor(tokens, dtype=torch.long)


class Block(nn.Module):
    def __init__(self, c, h, ratio, layers):
        super().__init__()
        self.h = h
        self.ln1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c)
        self.fc = nn.Linear(c, ratio * c)
        self.fc_proj = nn.Linear(ratio * c, c)
        with torch.no_grad():
            for l in (self.qkv, self.proj, self.fc, self.fc_proj):
                l.weight.normal_(0.0, 0.02)
                l.bias.zero_()
            std = 0.02 / math.sqrt(2.0 * layers)
            self.proj.weight.normal_(0.0, std)
            self.fc_proj.weight.normal_(0.0, std)

    def forward(self, x, mask):
        b, t, c = x.shape
        d = c // self.h
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, d).transpose(1, 2) for z in (q, k, v))
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(-1)
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, m, vocab):
        super().__init__()
        c = m["width"]
        self.vocab = vocab
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(m["seq_len"], c)
        self.blocks = nn.ModuleList(Block(c, m["heads"], m["mlp_ratio"], m["layers"])
                                    for _ in range(m["layers"]))
        self.ln_f = nn.LayerNorm(c)
        self.head = None if m["tied_head"] else nn.Linear(c, vocab, bias=False)
        with torch.no_grad():
            self.wte.weight.normal_(0.0, 0.02)
            self.wpe.weight.normal_(0.0, 0.01)
            if self.head is not None:
                self.head.weight.normal_(0.0, 0.02)
        self.register_buffer("mask", torch.ones(m["seq_len"], m["seq_len"], dtype=torch.bool).triu(1))

    def loss(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for b in self.blocks:
            x = b(x, self.mask)
        x = self.ln_f(x)
        logits = F.linear(x, self.wte.weight) if self.head is None else self.head(x)
        return F.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))


def lr_at(o, step, total):
    if o["warmup_steps"] > 0 and step <= o["warmup_steps"]:
        return o["lr"] * step / o["warmup_steps"]
    decay = total - o["warmup_steps"]
    if decay <= 0:
        return o["lr"]
    p = min(1.0, max(0.0, (step - o["warmup_steps"]) / decay))
    return o["min_lr"] + (o["lr"] - o["min_lr"]) * 0.5 * (1 + math.cos(math.pi * p))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, help="resolved config.json written by trainscope train")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--weights-out", default="", help="torch.save the final parameters here")
    a = ap.parse_args()
    cfg = json.load(open(a.config))
    m, o, tr = cfg["model"], cfg["optim"], cfg["train"]
    steps = a.steps or tr["steps"]
    torch.set_num_threads(tr["threads"] or os.cpu_count())
    torch.manual_seed(tr["seed"])
    torch.use_deterministic_algorithms(tr["deterministic"])
    tokens = load_corpus(cfg)
    vocab = m["vocab"] or 257
    t = m["seq_len"]
    n = (len(tokens) - 1) // t
    model = Gpt(m, vocab)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        is_ln = "ln" in name
        emb = name.startswith("wte") or name.startswith("wpe")
        (decay if name.endswith(".weight") and not is_ln and not emb else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    mb, accum = tr["micro_batch"], tr["grad_accum"]
    orders = {}

    def batch(index):
        ids = []
        for j in range(mb):
            pos = index * mb + j
            e = pos // n
            if e not in orders:
                orders[e] = shuffled_order(n, tr["seed"], e)
            ids.append(orders[e][pos % n])
        rows = torch.stack([tokens[i * t:i * t + t + 1] for i in ids])
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()

    # Build every batch up front so the timed loop is model work only (the C++ loader
    # prefetches in threads; this keeps the peer from paying Python data costs).
    batches = [batch(i) for i in range(steps * accum)]
    params = list(model.parameters())
    losses, step_ms = [], []
    micro = 0
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        lr = lr_at(o, step, steps)
        for g in opt.param_groups:
            g["lr"] = lr
        total = 0.0
        for _ in range(accum):
            x, y = batches[micro]
            micro += 1
            loss = model.loss(x, y)
            total += loss.item()
            (loss / accum).backward()
        if o["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, o["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_ms.append((time.perf_counter() - t0) * 1000)
        losses.append(total / accum)
    if a.weights_out:
        torch.save({name: p.detach().clone() for name, p in model.named_parameters()}, a.weights_out)
    timed = step_ms[1:] or step_ms
    tokens_per_step = mb * accum * t
    print(json.dumps({"losses": losses, "step_ms": step_ms,
                      "tokens_per_s": tokens_per_step * len(timed) * 1000.0 / sum(timed),
                      "threads": torch.get_num_threads(), "torch": torch.__version__}))


if __name__ == "__main__":
    sys.exit(main())
