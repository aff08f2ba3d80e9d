"""Writes the row-wise inputs that single `profk select` calls run on (under a profiler, or for their
statistics) as safetensors files of one tensor `x` each, into DIR:
    python3 bench/rows_inputs.py DIR
rows-F32.st, rows-BF16.st, rows-F16.st: 1024 x 2^18 standard normals (seed 0) in each type;
masked-F32.st: 8192 x 32768 standard normals (seed 1), the second half of every row at -inf.
"""
import json
import struct
import sys

import numpy as np


def write(path, x, dtype):
    if dtype == "BF16":
        data = (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    elif dtype == "F16":
        data = x.astype(np.float16).tobytes()
    else:
        data = x.tobytes()
    header = json.dumps({"x": {"dtype": dtype, "shape": list(x.shape), "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        f.write(data)


out = sys.argv[1]
x = np.random.default_rng(0).standard_normal((1024, 1 << 18), dtype=np.float32)
for dtype in ("F32", "BF16", "F16"):
    write(f"{out}/rows-{dtype}.st", x, dtype)
m = np.random.default_rng(1).standard_normal((8192, 32768), dtype=np.float32)
m[:, 16384:] = -np.inf
write(f"{out}/masked-F32.st", m, "F32")
