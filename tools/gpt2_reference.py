#!/usr/bin/env python3
"""Independent reference for the GPT-2 forward pass of the `activations` crate.

Writes a small GPT-2 with random weights in the Hugging Face layout (config.json +
model.safetensors, including the `attn.bias` buffers that old checkpoints carry) and the
activations that a float64 numpy implementation of Hugging Face's GPT2LMHeadModel computes
for it (reference.safetensors: tokens, resid_pre/resid_post of every layer, ln_final, logits).
The Rust test `activations/tests/reference.rs` checks candle's forward against it.

Only numpy is needed (`pip install -r tools/requirements-reference.txt`); safetensors files are
written by hand (8-byte little-endian header length, JSON header, raw little-endian data).

    python3 tools/gpt2_reference.py gpt2/tests/fixtures/gpt2-ref
"""
import json
import os
import struct
import sys

import numpy as np

CFG = dict(vocab_size=96, n_positions=16, n_embd=32, n_layer=2, n_head=4, layer_norm_epsilon=1e-5)
BATCH, SEQ = 2, 12
SEED = 1234


def write_safetensors(path, tensors):
    dtypes = {np.dtype(np.float32): "F32", np.dtype(np.uint32): "U32"}
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtypes[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


def random_weights(rng):
    d, v, p = CFG["n_embd"], CFG["vocab_size"], CFG["n_positions"]
    f32 = lambda *shape, std=0.3: (rng.standard_normal(shape) * std).astype(np.float32)
    w = {"wte.weight": f32(v, d), "wpe.weight": f32(p, d, std=0.1)}
    for i in range(CFG["n_layer"]):
        h = f"h.{i}."
        for ln in ("ln_1", "ln_2"):
            w[h + ln + ".weight"] = (1.0 + f32(d, std=0.2)).astype(np.float32)
            w[h + ln + ".bias"] = f32(d, std=0.1)
        for name, shape in (("attn.c_attn", (d, 3 * d)), ("attn.c_proj", (d, d)),
                            ("mlp.c_fc", (d, 4 * d)), ("mlp.c_proj", (4 * d, d))):
            w[h + name + ".weight"] = f32(*shape, std=1.0 / np.sqrt(shape[0]))
            w[h + name + ".bias"] = f32(shape[1], std=0.1)
        # Buffers of old checkpoints that loaders must ignore.
        w[h + "attn.bias"] = np.tril(np.ones((p, p), np.float32))[None, None]
    w["ln_f.weight"] = (1.0 + f32(d, std=0.2)).astype(np.float32)
    w["ln_f.bias"] = f32(d, std=0.1)
    return w


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(w, tokens):
    """Hugging Face GPT2LMHeadModel in float64: returns (resid_pre, resid_post, ln_final, logits)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    eps, nh = CFG["layer_norm_epsilon"], CFG["n_head"]
    b, t = tokens.shape
    d = CFG["n_embd"]
    hd = d // nh
    x = w["wte.weight"][tokens] + w["wpe.weight"][np.arange(t)]
    causal = np.tril(np.ones((t, t), bool))
    pre, post = [], []
    for i in range(CFG["n_layer"]):
        h = f"h.{i}."
        pre.append(x)
        a = layer_norm(x, w[h + "ln_1.weight"], w[h + "ln_1.bias"], eps)
        qkv = a @ w[h + "attn.c_attn.weight"] + w[h + "attn.c_attn.bias"]
        q, k, v = (m.reshape(b, t, nh, hd).transpose(0, 2, 1, 3) for m in np.split(qkv, 3, axis=-1))
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
        s = np.where(causal, s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        p = s / s.sum(-1, keepdims=True)
        o = (p @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        x = x + o @ w[h + "attn.c_proj.weight"] + w[h + "attn.c_proj.bias"]
        m = layer_norm(x, w[h + "ln_2.weight"], w[h + "ln_2.bias"], eps)
        m = gelu_new(m @ w[h + "mlp.c_fc.weight"] + w[h + "mlp.c_fc.bias"])
        x = x + m @ w[h + "mlp.c_proj.weight"] + w[h + "mlp.c_proj.bias"]
        post.append(x)
    ln_final = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps)
    return pre, post, ln_final, ln_final @ w["wte.weight"].T


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(SEED)
    weights = random_weights(rng)
    tokens = rng.integers(0, CFG["vocab_size"], size=(BATCH, SEQ)).astype(np.uint32)
    pre, post, ln_final, logits = forward(weights, tokens.astype(np.int64))
    config = dict(CFG, model_type="gpt2", architectures=["GPT2LMHeadModel"], activation_function="gelu_new",
                  n_ctx=CFG["n_positions"])
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), weights)
    ref = {"tokens": tokens, "ln_final": ln_final.astype(np.float32), "logits": logits.astype(np.float32)}
    for i in range(CFG["n_layer"]):
        ref[f"resid_pre.{i}"] = pre[i].astype(np.float32)
        ref[f"resid_post.{i}"] = post[i].astype(np.float32)
    write_safetensors(os.path.join(out_dir, "reference.safetensors"), ref)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "gpt2/tests/fixtures/gpt2-ref")
