"""Replica agreement: do the data-parallel ranks still hold the same parameters?

Data-parallel replicas stay bitwise identical as long as every rank applies the same
all-reduced gradients; a rank that skipped or mis-applied a gradient sync (an all_reduce into a
copy, a rank-local clip or scale, a skipped optimizer step) trains on silently from then on.
`ReplicaCheck` catches that: every N steps each rank sums every parameter in float64 (one read
of the weights; no device sync beyond the gather), the ranks all_gather the vector of sums (one
small collective, P float64 values) and compare them exactly. Replicas computed identically
give identical sums, so any difference is a divergence; ranks that differ from rank 0's value
(from the most common value, with three or more ranks) are named, with the parameters.

The gather is a collective of its own: every rank of the group must reach the same check (the
same step), so the check is opt-in (`watch(checksum_every=N)`) and meant for data-parallel
groups whose ranks run the same steps. It calls torch.distributed's own all_gather (not
trainscope.distributed.record's wrapper: the check is not part of the user's sequence).
"""
import collections

import torch
import torch.distributed as dist

_MAX_NAMED = 10  # parameters listed in a record


def _all_gather():
    """torch.distributed.all_gather as torch defines it (record() may have wrapped it)."""
    import sys
    rec = sys.modules.get("trainscope.distributed")
    recorder = getattr(rec, "_recorder", None) if rec is not None else None
    originals = getattr(recorder, "_originals", None) or {}
    return originals.get("all_gather", dist.all_gather)


class ReplicaCheck:
    """Compares parameter checksums across the ranks of `group` every `every` steps.

    named: [(name, parameter)] in the same order on every rank. Not thread-safe (the training
    thread). check(step) returns a record dict for the metrics file the first time the
    replicas differ (and again only after they agreed in between), else None.
    """

    def __init__(self, named, every, group=None, device=None):
        self.every = int(every)
        self.group = group
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._device = device if device is not None else self._params[0].device
        self._last_agree = None  # the last step all ranks agreed
        self._diverged = False
        self.first_divergence = None  # the record of the first divergence, for the caller

    def due(self, step):
        return self.every > 0 and step % self.every == 0

    def _sums(self):
        with torch.no_grad():
            return torch.stack([p.detach().sum(dtype=torch.float64) for p in self._params])

    def check(self, step):
        world = dist.get_world_size(self.group)
        if world < 2:
            return None
        # gloo gathers CPU tensors, NCCL device ones: keep the sums where the group's backend wants.
        backend = str(dist.get_backend(self.group)).lower()
        mine = self._sums().to("cpu" if backend == "gloo" else self._device)
        parts = [torch.empty_like(mine) for _ in range(world)]
        _all_gather()(parts, mine, group=self.group)
        table = torch.stack([p.cpu() for p in parts])  # (world, P)
        odd_ranks, odd_params = self._outliers(table)
        if not odd_ranks:
            self._last_agree = step
            self._diverged = False
            return None
        if self._diverged:
            return None
        self._diverged = True
        rec = {"type": "replica_divergence", "step": step, "checked_every": self.every,
               "last_agreeing_step": self._last_agree, "ranks": odd_ranks,
               "world_size": world, "parameters_differing": len(odd_params),
               "parameters": [self._names[i] for i in odd_params[:_MAX_NAMED]]}
        if self.first_divergence is None:
            self.first_divergence = rec
        return rec

    @staticmethod
    def _outliers(table):
        """The ranks whose sums differ from the reference row, and the parameter indices.

        Reference per parameter: the most common value (ties: rank 0's), compared exactly
        (NaN equals NaN: a NaN on every rank is the NaN tracer's business, not a divergence).
        """
        world, n = table.shape
        ranks, params = set(), []
        rows = table.tolist()
        for j in range(n):
            col = [("nan" if v != v else v) for v in (rows[r][j] for r in range(world))]
            counts = collections.Counter(col)
            best = max(counts.values())
            ref = next(v for v in col if counts[v] == best)  # the first (lowest rank) of the most common
            bad = [r for r in range(world) if col[r] != ref]
            if bad:
                ranks.update(bad)
                params.append(j)
        return sorted(ranks), params

    def sentence(self, rec):
        since = rec["last_agreeing_step"]
        where = ", ".join(rec["parameters"][:3]) + (
            " and %d more" % (rec["parameters_differing"] - 3) if rec["parameters_differing"] > 3 else "")
        return ("the data-parallel replicas diverged: at step %d rank(s) %s hold other parameter "
                "values than the others (%d parameters differ: %s)%s; a gradient sync was skipped "
                "or applied differently on those ranks since then (an all_reduce into a copy, a "
                "rank-local clip or scale, a skipped optimizer step): check the hang dumps' "
                "sequence at those steps and the sync code, then resume from the last checkpoint "
                "before it" % (rec["step"], ", ".join(str(r) for r in rec["ranks"]),
                               rec["parameters_differing"], where,
                               " (they agreed at step %d)" % since if since is not None else
                               " (no earlier check)"))
