"""Writes PyTorch zip checkpoints as torch.save writes them, without torch.

torch.save (PyTorch >= 1.6) writes a zip archive: <name>/data.pkl, the
object pickled at protocol 2 with each tensor reduced to
torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
requires_grad, backward_hooks) and each storage pickled as the persistent
id ('storage', torch.<Type>Storage, key, 'cpu', numel); <name>/data/<key>,
the storage's little-endian bytes, stored uncompressed; <name>/byteorder
and <name>/version. This script builds the same pickle stream with
stand-ins registered as torch's modules, so the opcodes are Python's own
pickler's. expected.json lists what each file must read as.

Run from this folder: python3 make.py
"""
import collections
import json
import pickle
import struct
import sys
import types
import zipfile

torch = types.ModuleType("torch")
utils = types.ModuleType("torch._utils")
tensor_mod = types.ModuleType("torch._tensor")
sys.modules.update({"torch": torch, "torch._utils": utils, "torch._tensor": tensor_mod})


def _rebuild_tensor_v2(*args):
    raise RuntimeError("never called: only pickled")


def _rebuild_parameter(*args):
    raise RuntimeError("never called: only pickled")


def _rebuild_from_type_v2(*args):
    raise RuntimeError("never called: only pickled")


for f, m in ((_rebuild_tensor_v2, utils), (_rebuild_parameter, utils), (_rebuild_from_type_v2, tensor_mod)):
    f.__module__ = m.__name__
    setattr(m, f.__name__, f)

FORMATS = {  # storage class: (struct format, dtype name)
    "FloatStorage": ("f", "F32"),
    "HalfStorage": ("e", "F16"),
    "BFloat16Storage": (None, "BF16"),
    "LongStorage": ("q", "I64"),
    "DoubleStorage": ("d", "F64"),
    "ByteStorage": ("B", None),
}
for name in FORMATS:
    cls = type(name, (), {"__module__": "torch"})
    setattr(torch, name, cls)


class Storage:
    def __init__(self, cls, values):
        self.cls, self.values = cls, values
        self.key = None

    def data(self):
        fmt = FORMATS[self.cls][0]
        if fmt is None:  # bfloat16: the high half of float32 (values chosen exact)
            return b"".join(struct.pack("<f", v)[2:] for v in self.values)
        return b"".join(struct.pack("<" + fmt, v) for v in self.values)


class Tensor:
    def __init__(self, storage, offset, size, stride=None, wrap=None):
        if stride is None:
            stride, acc = [], 1
            for d in reversed(size):
                stride.insert(0, acc)
                acc *= d
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())
        self.wrap = wrap

    def __reduce_ex__(self, proto):
        if self.wrap == "parameter":
            inner = Tensor.__new__(Tensor)
            inner.args, inner.wrap = self.args, None
            return (_rebuild_parameter, (inner, True, collections.OrderedDict()))
        if self.wrap == "subclass":
            return (_rebuild_from_type_v2, (_rebuild_tensor_v2, Tensor, self.args, {}))
        return (_rebuild_tensor_v2, self.args)


def save(path, obj, root="archive", compress_key=None):
    storages = []

    class Pickler(pickle.Pickler):
        def persistent_id(self, o):
            if isinstance(o, Storage):
                if o.key is None:
                    o.key = str(len(storages))
                    storages.append(o)
                return ("storage", getattr(torch, o.cls), o.key, "cpu", len(o.values))
            return None

    import io
    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump(obj)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(root + "/data.pkl", buf.getvalue())
        z.writestr(root + "/byteorder", "little")
        for s in storages:
            method = zipfile.ZIP_DEFLATED if s.key == compress_key else zipfile.ZIP_STORED
            z.writestr(zipfile.ZipInfo(root + "/data/" + s.key), s.data(), compress_type=method)
        z.writestr(root + "/version", "3\n")


expected = {}


def record(file, tensors, error=None):
    expected[file] = {"error": error} if error else {"tensors": tensors}


# A state dict as module.state_dict() gives it: an OrderedDict with
# _metadata, float32/bfloat16/float16/int64/float64 tensors, two views of
# one storage (a split weight), a tied weight (the same tensor twice), a
# parameter and a tensor subclass, and a scalar.
w = Storage("FloatStorage", [0.5, -1.25, 3.0, 4.5, -6.0, 7.75, 8.0, -9.5])
sd = collections.OrderedDict()
sd["proj.weight"] = Tensor(w, 0, [2, 3])
sd["proj.bias"] = Tensor(w, 6, [2])
sd["emb.weight"] = Tensor(Storage("BFloat16Storage", [1.0, -2.0, 0.375, 65536.0]), 0, [2, 2])
sd["tied.weight"] = sd["emb.weight"]
sd["half"] = Tensor(Storage("HalfStorage", [0.25, -3.5, 1024.0]), 0, [3])
sd["ids"] = Tensor(Storage("LongStorage", [7, -1, 1 << 40]), 0, [3])
sd["freqs"] = Tensor(Storage("DoubleStorage", [0.1, 0.2]), 0, [1, 2])
sd["param"] = Tensor(Storage("FloatStorage", [2.0, 4.0]), 0, [2], wrap="parameter")
sd["sub"] = Tensor(Storage("FloatStorage", [-1.0]), 0, [1], wrap="subclass")
sd["scale"] = Tensor(Storage("FloatStorage", [0.125]), 0, [])
sd["empty"] = Tensor(Storage("FloatStorage", []), 0, [0, 4])
sd._metadata = collections.OrderedDict([("", {"version": 1}), ("proj", {"version": 1})])
save("state_dict.pth", sd)
record("state_dict.pth", {
    "proj.weight": ["F32", [2, 3], [0.5, -1.25, 3.0, 4.5, -6.0, 7.75]],
    "proj.bias": ["F32", [2], [8.0, -9.5]],
    "emb.weight": ["BF16", [2, 2], [1.0, -2.0, 0.375, 65536.0]],
    "tied.weight": ["BF16", [2, 2], [1.0, -2.0, 0.375, 65536.0]],
    "half": ["F16", [3], [0.25, -3.5, 1024.0]],
    "ids": ["I64", [3], [7, -1, 1 << 40]],
    "freqs": ["F64", [1, 2], [0.1, 0.2]],
    "param": ["F32", [2], [2.0, 4.0]],
    "sub": ["F32", [1], [-1.0]],
    "scale": ["F32", [], [0.125]],
    "empty": ["F32", [0, 4], []],
})

# A training checkpoint: the weights nested under "state_dict" beside
# other objects, in a folder named after the file.
nested = {"epoch": 3, "lr": 1e-4, "state_dict": collections.OrderedDict([("a", Tensor(Storage("FloatStorage", [1.5, 2.5]), 0, [2]))])}
save("nested.ckpt", nested, root="nested")
record("nested.ckpt", {"a": ["F32", [2], [1.5, 2.5]]})

# Refused: a transposed view, a compressed storage, a storage type ferry
# does not read, an object that is not a dict, a dict without tensors.
s = Storage("FloatStorage", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
save("strided.pth", {"t": Tensor(s, 0, [3, 2], stride=[1, 3])})
record("strided.pth", None, "strided view")
save("compressed.pth", {"t": Tensor(Storage("FloatStorage", [1.0] * 64), 0, [64])}, compress_key="0")
record("compressed.pth", None, "compressed")
save("uint8.pth", {"t": Tensor(Storage("ByteStorage", [1, 2]), 0, [2])})
record("uint8.pth", None, "ByteStorage")
save("list.pth", [Tensor(Storage("FloatStorage", [1.0]), 0, [1])])
record("list.pth", None, "not a state dict")
save("no_tensors.pth", {"epoch": 3})
record("no_tensors.pth", None, "without tensors")

with open("expected.json", "w") as f:
    json.dump(expected, f, indent=1, sort_keys=True)
    f.write("\n")
