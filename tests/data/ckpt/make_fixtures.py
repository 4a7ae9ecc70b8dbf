#!/usr/bin/python3
"""Writes the ckpt golden fixtures into this folder (run it from anywhere; deterministic).

safetensors files follow the public format (huggingface/safetensors README): u64 little-endian
header length N, N bytes of JSON {name: {dtype, shape, data_offsets}, "__metadata__": {...}},
space-padded to a multiple of 8, then the data section.

  small.safetensors    F32, F16, BF16, I64 tensors, all finite
  nonfinite.safetensors  an F32 tensor with a NaN and an Inf
  small_b.safetensors  small.safetensors with one F32 value changed (for diff)
  sharded/             model.safetensors.index.json + model-0000{1,2}-of-00002.safetensors
  dcp/                 a torch.distributed.checkpoint folder: .metadata + __0_0.distcp
  bad_json/step-20/    run/checkpoints/step-20 with rank0.json not JSON and rank1.json a JSON
                       list, the manifest's sizes and xxh3 hashes rewritten to match them
                       (the system's libxxhash through ctypes)

Debian's python3 here has no torch, so dcp/.metadata is pickled (protocol 2) from stand-in
classes registered under the real module paths (torch.distributed.checkpoint.metadata,
torch.Size, torch.float32 ...): the same GLOBAL/REDUCE/BUILD opcodes a real
`torch.distributed.checkpoint.save` writes, which is what a reader sees. The .distcp payload
is filler of the right length (readers list, they do not load it).
"""
import json, os, pickle, struct, sys, types
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))


def f16(x):
    return struct.pack("<e", x)


def bf16(x):
    return struct.pack("<f", x)[2:]


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes), laid out in the given order."""
    header, at = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(raw)]}
        at += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, _, raw in tensors:
            f.write(raw)


def small(changed=False):
    w = [0.5, -1.25, 2.0, 3.0, -4.0, 0.125]
    if changed:
        w[4] = -4.5
    return [
        ("embed.weight", "F32", [2, 3], struct.pack("<6f", *w)),
        ("layer.0.bias", "F16", [4], b"".join(f16(x) for x in [1.0, -2.0, 0.5, 65504.0])),
        ("layer.0.scale", "BF16", [2], b"".join(bf16(x) for x in [1.5, -3.0])),
        ("step", "I64", [], struct.pack("<q", 42)),
    ]


# ---- DCP stand-ins (module paths as torch 2.x pickles them)
def module(name):
    m = types.ModuleType(name)
    sys.modules[name] = m
    return m


torch = module("torch")
for n in ["torch.distributed", "torch.distributed.checkpoint"]:
    module(n)
meta_mod = module("torch.distributed.checkpoint.metadata")
fs_mod = module("torch.distributed.checkpoint.filesystem")


class Global:
    """Pickles as GLOBAL torch.<name> (dtype, layout)."""

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return self.name


class Size(tuple):
    def __reduce__(self):
        return (Size, (tuple(self),))


Size.__module__, Size.__qualname__ = "torch", "Size"
torch.Size = Size
for n in ["float32", "float16", "int64", "strided"]:
    setattr(torch, n, Global(n))
    getattr(torch, n).__module__ = "torch"


def stand_in(mod, cls):
    cls.__module__ = mod.__name__
    setattr(mod, cls.__name__, cls)
    return cls


@dataclass
class ChunkStorageMetadata:
    offsets: Size
    sizes: Size


@dataclass
class TensorProperties:
    dtype: object
    layout: object = None
    requires_grad: bool = False
    memory_format: int = 0
    pin_memory: bool = False

    def __getstate__(self):
        return (self.dtype, self.layout, self.requires_grad, self.memory_format, self.pin_memory)

    def __setstate__(self, s):
        (self.dtype, self.layout, self.requires_grad, self.memory_format, self.pin_memory) = s


@dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: Size
    chunks: list


@dataclass
class BytesStorageMetadata:
    pass


@dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: object = None
    index: object = None


@dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: object = None
    storage_data: object = None


@dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int


for c in [ChunkStorageMetadata, TensorProperties, TensorStorageMetadata, BytesStorageMetadata,
          MetadataIndex, Metadata]:
    stand_in(meta_mod, c)
stand_in(fs_mod, _StorageInfo)


def write_dcp(folder):
    os.makedirs(folder, exist_ok=True)
    tensors = [("model.embed.weight", "float32", 4, [4, 3]), ("model.head.bias", "float16", 2, [5]),
               ("optim.step", "int64", 8, [])]
    sd, storage, at = {}, {}, 0
    for fqn, dt, size, shape in tensors:
        zero = Size([0] * len(shape))
        sd[fqn] = TensorStorageMetadata(TensorProperties(getattr(torch, dt), torch.strided),
                                        Size(shape), [ChunkStorageMetadata(zero, Size(shape))])
        n = size
        for d in shape:
            n *= d
        n += 512  # a torch.save zip's overhead
        storage[MetadataIndex(fqn, zero, 0)] = _StorageInfo("__0_0.distcp", at, n)
        at += n
    sd["extra_state"] = BytesStorageMetadata()
    storage[MetadataIndex("extra_state", None, 0)] = _StorageInfo("__0_0.distcp", at, 100)
    at += 100
    with open(os.path.join(folder, ".metadata"), "wb") as f:
        pickle.dump(Metadata(sd, {k: (k,) for k in sd}, storage), f, protocol=2)
    with open(os.path.join(folder, "__0_0.distcp"), "wb") as f:
        f.write(b"\0" * at)


def xxh3_hex(data):
    import ctypes
    lib = ctypes.CDLL("libxxhash.so.0")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return "%016x" % lib.XXH3_64bits(data, len(data))


def write_bad_json(folder):
    import shutil
    src = os.path.join(HERE, "run", "checkpoints", "step-20")
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(src, folder)
    bad = {"rank0.json": b"rank 0 state: not JSON\n", "rank1.json": b"[0, 160, 1234]\n"}
    for name, data in bad.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    mpath = os.path.join(folder, "manifest.json")
    with open(mpath) as f:
        manifest = json.load(f)
    for e in manifest["files"]:
        if e["path"] in bad:
            e["bytes"], e["xxh3"] = len(bad[e["path"]]), xxh3_hex(bad[e["path"]])
    with open(mpath, "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    write_safetensors(os.path.join(HERE, "small.safetensors"), small(), {"format": "pt"})
    write_safetensors(os.path.join(HERE, "small_b.safetensors"), small(True), {"format": "pt"})
    write_safetensors(os.path.join(HERE, "nonfinite.safetensors"), [
        ("ok", "F32", [2], struct.pack("<2f", 1.0, 2.0)),
        ("bad", "F32", [3], struct.pack("<3f", 1.0, float("nan"), float("inf"))),
    ])
    sh = os.path.join(HERE, "sharded")
    os.makedirs(sh, exist_ok=True)
    parts = {"model-00001-of-00002.safetensors": small()[:2],
             "model-00002-of-00002.safetensors": small()[2:]}
    weight_map, total = {}, 0
    for name, ts in parts.items():
        write_safetensors(os.path.join(sh, name), ts, {"format": "pt"})
        for t in ts:
            weight_map[t[0]] = name
            total += len(t[3])
    with open(os.path.join(sh, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2,
                  sort_keys=True)
        f.write("\n")
    write_dcp(os.path.join(HERE, "dcp"))
    write_bad_json(os.path.join(HERE, "bad_json", "step-20"))


if __name__ == "__main__":
    main()
