#!/usr/bin/env python3
"""Tiny random models of each supported family, saved with transformers' save_pretrained, and the
activations transformers computes for them (f32, CPU) at every hook point, as test fixtures for the
`models` crate (models/tests/fixtures/<name>/: the model, and expected.safetensors with `tokens`,
one tensor per TransformerLens hook name, `logits` and `loss`).

    python3 -m venv /work/hf-venv && /work/hf-venv/bin/pip install torch transformers safetensors
    /work/hf-venv/bin/python tools/hf_fixtures.py [OUT_DIR]
"""
import json
import shutil
import sys
from pathlib import Path

import safetensors.torch
import torch
import transformers
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

VOCAB = 260  # 256 byte tokens and 4 specials: the fixture tokenizer's vocabulary
BATCH, SEQ = 2, 12
BOS = 256

SMALL = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    attn_implementation="eager",
)


def llama():
    cfg = LlamaConfig(
        **SMALL,
        rms_norm_eps=1e-5,
        bos_token_id=BOS,
        eos_token_id=257,
        tie_word_embeddings=False,
        rope_parameters=dict(
            rope_type="llama3",
            rope_theta=10000.0,
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=16,
        ),
    )
    return LlamaForCausalLM(cfg), dict(dtype=torch.bfloat16)


def qwen2():
    cfg = Qwen2Config(
        **SMALL,
        tie_word_embeddings=True,
        rope_parameters=dict(rope_type="linear", rope_theta=1000.0, factor=2.0),
    )
    return Qwen2ForCausalLM(cfg), dict(max_shard_size="100KB")


def qwen3():
    cfg = Qwen3Config(**SMALL, head_dim=24, tie_word_embeddings=False)
    return Qwen3ForCausalLM(cfg), dict(dtype=torch.float16)


def mistral():
    cfg = MistralConfig(**SMALL, sliding_window=4, tie_word_embeddings=False)
    return MistralForCausalLM(cfg), {}


def gemma2():
    small = dict(SMALL, num_hidden_layers=3)
    cfg = Gemma2Config(
        **small,
        head_dim=16,
        query_pre_attn_scalar=24,
        sliding_window=4,
        attn_logit_softcapping=5.0,
        final_logit_softcapping=3.0,
        hidden_activation="gelu_pytorch_tanh",
    )
    return Gemma2ForCausalLM(cfg), {}


def pythia():
    cfg = GPTNeoXConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=128,
        rotary_pct=0.5,
        use_parallel_residual=True,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    return GPTNeoXForCausalLM(cfg), {}


FAMILIES = dict(llama=llama, qwen2=qwen2, qwen3=qwen3, mistral=mistral, gemma2=gemma2, pythia=pythia)


def randomize(model, gen):
    """Weights large enough that attention is far from uniform; norm scales around their identity."""
    with torch.no_grad():
        unit_offset = model.config.model_type == "gemma2"
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name and name.endswith("weight"):
                p.copy_((0.0 if unit_offset else 1.0) + 0.1 * noise)
            else:
                p.copy_(0.15 * noise)


def first(x):
    return x[0] if isinstance(x, tuple) else x


def blocks_of(model):
    if model.config.model_type == "gpt_neox":
        return model.gpt_neox.layers, model.gpt_neox.final_layer_norm
    return model.model.layers, model.model.norm


def attach_hooks(model, store):
    """Forward hooks recording each TransformerLens hook point by its name."""
    layers, final_norm = blocks_of(model)
    gemma = model.config.model_type == "gemma2"
    neox = model.config.model_type == "gpt_neox"

    def save(name):
        return lambda _m, _i, out: store.__setitem__(name, first(out).detach().clone())

    def save_input(name):
        def hook(_m, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            store[name] = x.detach().clone()

        return hook

    for l, layer in enumerate(layers):
        layer.register_forward_pre_hook(save_input(f"blocks.{l}.hook_resid_pre"), with_kwargs=True)
        layer.register_forward_hook(save(f"blocks.{l}.hook_resid_post"))
        mlp = layer.mlp
        mlp.register_forward_pre_hook(save_input(f"blocks.{l}.ln2.hook_normalized"), with_kwargs=True)
        if gemma:
            layer.post_attention_layernorm.register_forward_hook(save(f"blocks.{l}.hook_attn_out"))
            layer.post_feedforward_layernorm.register_forward_hook(save(f"blocks.{l}.hook_mlp_out"))
        else:
            attn = layer.attention if neox else layer.self_attn
            attn.register_forward_hook(save(f"blocks.{l}.hook_attn_out"))
            mlp.register_forward_hook(save(f"blocks.{l}.hook_mlp_out"))
    final_norm.register_forward_hook(save("ln_final.hook_normalized"))


def byte_tokenizer(out):
    """A byte-level BPE without merges over the fixture vocabulary, with a BOS special."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {c: i for i, c in enumerate(bytes_to_unicode().values())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
    tok.save(str(out / "tokenizer.json"))


def build(name, make, out, seed):
    torch.manual_seed(seed)
    model, save_opts = make()
    gen = torch.Generator().manual_seed(seed)
    randomize(model, gen)
    model.eval()
    dest = out / name
    shutil.rmtree(dest, ignore_errors=True)
    dtype = save_opts.pop("dtype", torch.float32)
    model.to(dtype).save_pretrained(dest, safe_serialization=True, **save_opts)
    (dest / "generation_config.json").unlink(missing_ok=True)
    # The reference is what transformers computes in f32 from the files as saved.
    model = type(model).from_pretrained(dest, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    if name == "llama":
        tokens[:, 0] = BOS
        byte_tokenizer(dest)
    store = {}
    attach_hooks(model, store)
    with torch.no_grad():
        outputs = model(input_ids=tokens, labels=tokens)
    store["tokens"] = tokens
    store["logits"] = outputs.logits.float()
    store["loss"] = outputs.loss.float().reshape(1)
    tensors = {k: v.contiguous() for k, v in store.items()}
    safetensors.torch.save_file(tensors, str(dest / "expected.safetensors"))
    print(f"{name}: {len(tensors) - 3} hooks, loss {outputs.loss.item():.4f}")


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "models/tests/fixtures"
    out.mkdir(parents=True, exist_ok=True)
    for seed, (name, make) in enumerate(FAMILIES.items()):
        build(name, make, out, 1000 + seed)
    versions = dict(transformers=transformers.__version__, torch=torch.__version__, batch=BATCH, seq=SEQ)
    (out / "VERSIONS.json").write_text(json.dumps(versions, indent=2) + "\n")


if __name__ == "__main__":
    main()
