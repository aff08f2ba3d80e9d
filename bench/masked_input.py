"""Writes the masked block-selection rows (standard normals, the second half of every row at -inf) as a
safetensors file with one f32 tensor `x`, so that a single `profk select` call can run under a profiler:
    python3 bench/masked_input.py /tmp/masked.safetensors [ROWS N]
"""
import json
import struct
import sys

import numpy as np

path = sys.argv[1]
rows, n = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (8192, 32768)
x = np.random.default_rng(0).standard_normal((rows, n), dtype=np.float32)
x[:, n // 2 :] = -np.inf
data = x.tobytes()
header = json.dumps({"x": {"dtype": "F32", "shape": [rows, n], "data_offsets": [0, len(data)]}}).encode()
header += b" " * (-len(header) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(header)))
    f.write(header)
    f.write(data)
