#!/usr/bin/env python3
"""A model file's shape without its weights, and a stand-in rebuilt from that shape (GGUF or safetensors).

For speed measurements on a machine the real weights cannot be copied to (the lent GPU machine takes
64 MiB per call): the stand-in has the real file's header (for a GGUF: tokenizer, chat template,
architecture), tensor names, shapes, types and offsets, and its size, so an engine loads and runs it
as it runs the real model; only the weights differ. The shape keeps the first SAMPLE bytes of each
tensor (whole blocks; small tensors such as norms whole) and the stand-in repeats them to each
tensor's length, so weights, activations and logits keep realistic magnitudes (random quants do
not: their activations overflow). What a stand-in LLM writes is not text, so only speed means
anything. The stand-in is deterministic: the same shape gives the same bytes, so its sha256 can be
pinned.

    scripts/probes/model-shape.py shell REAL SHAPE     # header + samples (~11 MB for the Qwen2 0.5B GGUF)
    scripts/probes/model-shape.py fill SHAPE OUT       # the stand-in, the size of REAL

Python 3 alone.
"""
import json
import math
import struct
import sys

SAMPLE = 32 << 10
MAGIC = b"RBSHAPE1"
# ggml type -> (elements per block, bytes per block)
GGML = {
    0: (1, 4), 1: (1, 2), 30: (1, 2),  # F32, F16, BF16
    2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),  # Q4_0 Q4_1 Q5_0 Q5_1 Q8_0
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),  # Q2_K..Q6_K
}
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        value = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value[0]

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8", "replace")

    def value(self, kind):
        if kind == 8:
            return self.string()
        if kind == 9:
            item, n = self.take("<I"), self.take("<Q")
            return [self.value(item) for _ in range(n)]
        return self.take(SCALAR[kind])


def gguf_layout(data):
    """(header bytes, [(name, absolute offset, bytes, bytes per block)]) of a GGUF file's start."""
    r = Reader(data)
    r.pos = 4
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    if version < 2:
        sys.exit(f"error: GGUF version {version} is not supported (2 or 3)")
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.take("<I"))
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("<Q") for _ in range(r.take("<I"))]
        kind, offset = r.take("<I"), r.take("<Q")
        if kind not in GGML:
            sys.exit(f"error: tensor {name} has ggml type {kind}, which this script does not know")
        per_block, block_bytes = GGML[kind]
        tensors.append((name, offset, math.prod(dims) // per_block * block_bytes, block_bytes))
    align = int(meta.get("general.alignment", 32))
    start = (r.pos + align - 1) // align * align
    return start, [(n, start + o, b, u) for n, o, b, u in tensors]


def safetensors_layout(data):
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    tensors = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors.append((name, 8 + n + begin, end - begin, SAFETENSORS_BYTES[info["dtype"]]))
    return 8 + n, tensors


def layout(data):
    if data[:4] == b"GGUF":
        return gguf_layout(data)
    (n,) = struct.unpack_from("<Q", data, 0)
    if data[8:9] == b"{" and 8 + n <= len(data):
        return safetensors_layout(data)
    sys.exit("error: neither a GGUF nor a safetensors file")


def shell(real, out):
    with open(real, "rb") as f:
        head = f.read(64 << 20)  # a header is a few MB at most; tensor data follows
        start, tensors = layout(head)
        if start > len(head):
            sys.exit("error: the header is larger than 64 MiB")
        size = f.seek(0, 2)
        samples = []
        for _, offset, nbytes, unit in sorted(tensors, key=lambda t: t[1]):
            f.seek(offset)
            samples.append(f.read(min(nbytes, SAMPLE // unit * unit)))
    with open(out, "wb") as f:
        f.write(MAGIC + struct.pack("<QQ", start, size) + head[:start])
        for sample in samples:
            f.write(struct.pack("<Q", len(sample)) + sample)
    print(f"{out}: {start} header bytes, {len(tensors)} tensors sampled, real file {size} bytes")


def fill(shape, out):
    data = open(shape, "rb").read()
    if data[:8] != MAGIC:
        sys.exit(f"error: {shape} is not a shape file (scripts/probes/model-shape.py shell makes one)")
    start, size = struct.unpack_from("<QQ", data, 8)
    head = data[24:24 + start]
    _, tensors = layout(head)
    at = 24 + start
    with open(out, "wb") as f:
        f.write(head)
        for _, offset, nbytes, _ in sorted(tensors, key=lambda t: t[1]):
            (n,) = struct.unpack_from("<Q", data, at)
            sample = data[at + 8:at + 8 + n]
            at += 8 + n
            f.seek(offset)
            f.write((sample * (nbytes // max(n, 1) + 1))[:nbytes])
        f.truncate(size)
    print(f"{out}: {size} bytes, {len(tensors)} tensors, each its sample repeated")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("shell", "fill"):
        sys.exit(__doc__)
    {"shell": shell, "fill": fill}[sys.argv[1]](sys.argv[2], sys.argv[3])
