#!/usr/bin/python3
"""Writes the pickle-reader fixtures into this folder (deterministic; commit the output).

  values_p<N>.pkl       one structure of plain values, enums and dataclasses, pickled by
                        Python's own pickle at protocol N (0-5)
  values.expected.json  what core/pickle.h's ToJson must make of each of them (the mapping
                        of docs/formats.md "Pickle", computed here from the Python values)
  dcp/                  a torch.distributed.checkpoint folder written by torch 1.13
                        (save_state_dict, FileSystemWriter, no_dist=True): a tiny model and
                        its Adam state flattened to one level, an int64 and a float16 tensor,
                        and a non-tensor entry (the optimizer's param_groups)
  dcp.expected.json     what the .metadata says, read back by Python's pickle: per entry
                        its kind, dtype, size, chunks, and the storage (file, offset, length)
  dcp_bad/              dcp/ with its .metadata damaged (write_dcp_bad)
  fr_skipped/           tests/data/hang/skipped (2 ranks, rank 1 skipped bucket 0 of step 5)
                        as pickles: rank 0 as PyTorch's writer pickles it (protocol 2, the
                        opcodes torch::jit::Pickler writes), rank 1 by pickle.dumps (protocol 4)

`make_fixtures.py --fr-bench DIR` writes the dumps of docs/PERFORMANCE.md "Pickle dumps"
instead (not committed). Run with Debian's /usr/bin/python3 (torch 1.13, where DCP lives in
torch.distributed._shard.checkpoint).
"""
import collections, dataclasses, enum, importlib.util, json, os, pickle, shutil, sys

HERE = os.path.dirname(os.path.abspath(__file__))


class Color(enum.Enum):
    RED = 1
    GREEN = "green"


@dataclasses.dataclass
class Point:
    x: int
    y: float


class Tag:
    """Pickled by value through its own __reduce__: REDUCE(Tag, ("v1",))."""

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return (Tag, (self.name,))


SHARED = [1, 2]
VALUES = {
    "none": None, "true": True, "false": False,
    "ints": [0, 1, -1, 255, 256, 65535, 65536, -129, 2**31 - 1, -2**31, 2**31, 2**63 - 1, -2**63],
    "big": [2**64, -2**64 - 5, 10**40],
    "floats": [0.0, -1.5, 1e300, 3.141592653589793],
    "str": ["", "ascii", "\u00fcn\u00efc\u00f6d\u00e9 \u2713 \U0001d11e", "back\\slash\nnew line",
            "x" * 300],
    "bytes": [b"", b"\x00\xff\x80abc", bytes(range(256))],
    "bytearray": bytearray(b"\x01\x02\xfe"),
    "tuples": [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)],
    "set": {1, 2, 3}, "frozenset": frozenset({"a"}),
    "int_keys": {1: "one", 2: "two"}, "tuple_keys": {(1, 2): "pair"},
    "nested": {"a": [{"b": [1, [2, [3]]]}]},
    "shared": [SHARED, SHARED],
    "ordered": collections.OrderedDict([("z", 1), ("a", 2)]),
    "enum": [Color.RED, Color.GREEN],
    "dataclass": Point(3, 0.5),
    "reduce": Tag("v1"),
}


def expected_json(v):
    """The documented mapping (core/pickle.h ToJson) of a Python value."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, enum.Enum):  # by name (Python 3.11+: getattr(cls, name)) or by value
        cls = f"{type(v).__module__}.{type(v).__qualname__}"
        func, args = v.__reduce_ex__(4)[:2]
        if func is getattr:
            return f"{cls}.{args[1]}"
        return {"class": cls, "args": [expected_json(v.value)]}
    if isinstance(v, Tag):
        return {"class": f"{type(v).__module__}.Tag", "args": [v.name]}
    if dataclasses.is_dataclass(v):
        return {"class": f"{type(v).__module__}.{type(v).__qualname__}", "args": [],
                "state": {k: expected_json(x) for k, x in vars(v).items()}}
    if isinstance(v, int):
        return v if -2**63 <= v < 2**63 else str(v)
    if isinstance(v, float):
        return v
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": len(v), "hex": bytes(v[:64]).hex()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [expected_json(x) for x in v]
    if isinstance(v, dict):
        return {k if isinstance(k, str) else json.dumps(expected_json(k), separators=(",", ":")):
                expected_json(x) for k, x in v.items()}
    raise TypeError(type(v))


def write_values():
    for p in range(6):
        with open(os.path.join(HERE, f"values_p{p}.pkl"), "wb") as f:
            pickle.dump(VALUES, f, protocol=p)
    with open(os.path.join(HERE, "values.expected.json"), "w") as f:
        json.dump(expected_json(VALUES), f, indent=1, sort_keys=True)
        f.write("\n")


def import_torch_dcp():
    """torch 1.13's DCP under Python 3.11: its dataclasses use an unhashable dataclass as a
    field default, which 3.11 refuses; giving such classes object's hash lets them load."""
    original = dataclasses.dataclass

    def hashable_dataclass(cls=None, **kw):
        def wrap(c):
            out = original(**kw)(c)
            if out.__hash__ is None:
                out.__hash__ = object.__hash__
            return out
        return wrap if cls is None else wrap(cls)

    dataclasses.dataclass = hashable_dataclass
    try:
        import torch
        import torch.distributed._shard.checkpoint as dcp
    finally:
        dataclasses.dataclass = original
    return torch, dcp


def write_dcp():
    torch, dcp = import_torch_dcp()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    # torch 1.13's DCP stores a nested dict as one pickled blob: flatten to tensors.
    sd = {f"model.{k}": v for k, v in model.state_dict().items()}
    for i, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            sd[f"optim.state.{i}.{k}"] = v
    sd["optim.param_groups"] = opt.state_dict()["param_groups"]
    sd["half"] = torch.ones(2, 2, dtype=torch.float16)
    sd["step"] = torch.tensor(7, dtype=torch.int64)
    folder = os.path.join(HERE, "dcp")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    dcp.save_state_dict(sd, dcp.FileSystemWriter(folder), no_dist=True)
    with open(os.path.join(folder, ".metadata"), "rb") as f:
        meta = pickle.load(f)
    out = {}
    for fqn, m in meta.state_dict_metadata.items():
        storage = sorted([s.relative_path, s.offset, s.length]
                         for k, s in meta.storage_data.items() if k.fqn == fqn)
        if type(m).__name__ == "BytesStorageMetadata":
            out[fqn] = {"kind": "bytes", "storage": storage}
        else:
            out[fqn] = {"kind": "tensor", "dtype": str(m.properties.dtype).replace("torch.", ""),
                        "size": list(m.size), "chunks": len(m.chunks), "storage": storage}
    with open(os.path.join(HERE, "dcp.expected.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    write_dcp_bad(torch, meta, folder)


def write_dcp_bad(torch, meta, good):
    """dcp_bad/: the same metadata damaged the ways verify must name: model.0.weight's
    chunk covers 2 of its 3 rows, model.0.bias is stored "../outside.distcp", half has no
    storage_data entry, optim.param_groups (bytes) neither. The other files are copied."""
    folder = os.path.join(HERE, "dcp_bad")
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(good, folder)
    sdm = meta.state_dict_metadata
    sdm["model.0.weight"].chunks[0].sizes = torch.Size([2, 4])
    for index, info in list(meta.storage_data.items()):
        if index.fqn == "model.0.bias":
            info.relative_path = "../outside.distcp"
        if index.fqn in ("half", "optim.param_groups"):
            del meta.storage_data[index]
    with open(os.path.join(folder, ".metadata"), "wb") as f:
        pickle.dump(meta, f)


def load_hang_fixtures():
    spec = importlib.util.spec_from_file_location(
        "hang_fixtures", os.path.join(HERE, "..", "hang", "make_fixtures.py"))
    hang = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hang)
    return hang


def write_fr():
    hang = load_hang_fixtures()
    folder = os.path.join(HERE, "fr_skipped")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    # As tests/data/hang/skipped (make_fixtures.py there): same ranks, same steps.
    for r in range(2):
        k = hang.Rank(r, hang.world(2)).steps(1, 4, [1024, 512, 256])
        if r == 0:
            k.op("all_reduce", 1024, state="started", caller="step 5 grad bucket 0")
        else:
            k.op("all_reduce", 512, state="started", caller="step 5 grad bucket 1")
        doc = k.doc(True)
        data = hang.torch_like_pickle(doc) if r == 0 else pickle.dumps(doc, protocol=4)
        with open(os.path.join(folder, f"nccl_trace_rank_{r}"), "wb") as f:
            f.write(data)


def write_fr_bench(out):
    """docs/PERFORMANCE.md "Pickle dumps": 2 ranks x 20,000 entries (5,000 steps of 4
    buckets, 3 frames each) as JSON, as torch's protocol-2 pickle and as Python's protocol 4."""
    hang = load_hang_fixtures()
    for fmt in ("json", "p2", "p4"):
        os.makedirs(os.path.join(out, fmt), exist_ok=True)
    for r in range(2):
        k = hang.Rank(r, hang.world(2))
        for s in range(1, 5001):
            for b in range(4):
                k.op("all_reduce", 1024 * (b + 1), caller=f"step {s} grad bucket {b}",
                     frames=["reduce_grads", "train_step", "main"])
        name = f"nccl_trace_rank_{r}"
        with open(os.path.join(out, "json", name), "w") as f:
            json.dump(k.doc(False), f)
        with open(os.path.join(out, "p2", name), "wb") as f:
            f.write(hang.torch_like_pickle(k.doc(True)))
        with open(os.path.join(out, "p4", name), "wb") as f:
            f.write(pickle.dumps(k.doc(True), protocol=4))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--fr-bench":
        return write_fr_bench(sys.argv[2])
    write_values()
    write_dcp()
    write_fr()


if __name__ == "__main__":
    sys.exit(main())
