#!/usr/bin/env python3
"""Loads a run's exported SAE with SAELens (the real package) and checks it.

    python3 tools/saelens_check.py RUN_DIR [--device cpu|cuda]

For every SAE folder listed in RUN_DIR/sae/pretrained_saes.yaml (docs/saelens.md):

1. SAE.load_from_disk(RUN_DIR/sae/<sae_id>);
2. SAE.from_pretrained(repo_id, sae_id) from an offline Hugging Face Hub cache (HF_HUB_OFFLINE=1) that holds
   RUN_DIR/sae/ as the hub cache stores a downloaded repository (blobs named by their SHA-256, the snapshot's
   files linking to them, refs/main naming the snapshot): a repository id passed as the release is how
   SAELens loads a repository that is not in its shipped pretrained_saes.yaml;
3. SAE.from_pretrained(release, sae_id) with the release's entry (RUN_DIR/sae/pretrained_saes.yaml) added to
   SAELens' list of releases, read by SAELens' own parser;

and checks that each loaded SAE's encode and decode of random inputs match a numpy reimplementation of the
exported JumpReLU SAE read straight from sae_weights.safetensors. Exits 1 on any mismatch. A crosscoder
(architecture crosscoder_jumprelu) has no SAELens class and is reported as skipped.

Needs sae-lens (tools/saelens_wheels.sh lists the wheels for a machine without network).
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

# The hub library reads these when it is imported: set before sae_lens is.
HUB = Path(tempfile.mkdtemp(prefix="saelens-check-hub-"))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_CACHE"] = str(HUB)
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import numpy as np  # noqa: E402
import yaml  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

RELEASE_FILE = "pretrained_saes.yaml"
COMMIT = "0" * 40


def place_in_hub_cache(repo_root: Path, repo_id: str) -> Path:
    """Copies the repository's files into HF_HUB_CACHE as a download of revision main leaves them."""
    repo = HUB / ("models--" + repo_id.replace("/", "--"))
    blobs, snapshot = repo / "blobs", repo / "snapshots" / COMMIT
    blobs.mkdir(parents=True, exist_ok=True)
    for path in sorted(p for p in repo_root.rglob("*") if p.is_file()):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        shutil.copyfile(path, blobs / digest)
        link = snapshot / path.relative_to(repo_root)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blobs / digest, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return repo


def register_release(entry_file: Path) -> None:
    """Adds the release's entry to SAELens' list: its parser reads the shipped yaml and this entry."""
    import importlib.resources

    from sae_lens.loading import pretrained_saes_directory as directory

    shipped = importlib.resources.files("sae_lens").joinpath(RELEASE_FILE).read_text()
    merged = Path(tempfile.mkdtemp(prefix="saelens-check-yaml-"))
    (merged / RELEASE_FILE).write_text(shipped.rstrip("\n") + "\n" + entry_file.read_text())
    directory.files = lambda package: merged  # the parser opens files("sae_lens") / RELEASE_FILE
    directory.get_pretrained_saes_directory.cache_clear()


def reference(weights: dict, x: np.ndarray):
    """The exported JumpReLU SAE in float64: f = ReLU(pre)·[pre > θ], pre = (x − b_dec)·W_enc + b_enc."""
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    pre = (x - w["b_dec"]) @ w["W_enc"] + w["b_enc"]
    acts = np.maximum(pre, 0.0) * (pre > w["threshold"])
    return acts, acts @ w["W_dec"] + w["b_dec"]


def check(sae, weights: dict, how: str, device: str, rng) -> list:
    import torch

    d_in, d_sae = weights["W_enc"].shape
    problems = []
    if (sae.cfg.d_in, sae.cfg.d_sae) != (d_in, d_sae):
        problems.append(f"{how}: d_in, d_sae = {sae.cfg.d_in}, {sae.cfg.d_sae}, weights say {d_in}, {d_sae}")
    # Inputs around the SAE's own scale: b_dec plus noise as wide as the encoder's reach.
    scale = float(np.abs(weights["b_dec"]).mean() + 1.0)
    x = (weights["b_dec"] + rng.standard_normal((64, d_in)) * scale).astype(np.float32)
    want_acts, want_recon = reference(weights, x.astype(np.float64))
    with torch.no_grad():
        acts = sae.encode(torch.from_numpy(x).to(device)).double().cpu().numpy()
        recon = sae.decode(torch.from_numpy(want_acts.astype(np.float32)).to(device)).double().cpu().numpy()
    for name, got, want in [("encode", acts, want_acts), ("decode", recon, want_recon)]:
        # A pre-activation within float32 rounding of θ may fall on the other side: such a flip is
        # counted (at most 2 allowed), and the error is measured where both agree on what fired.
        same = (got > 0) == (want > 0) if name == "encode" else np.ones(got.shape, bool)
        flips = int(np.count_nonzero(~same))
        err = np.abs(np.where(same, got - want, 0.0)).max() / max(np.abs(want).max(), 1e-12)
        print(f"  {how}: {name} max relative error {err:.2e}" + (f", {flips} threshold flips" if flips else ""))
        if err > 1e-4 or flips > 2:
            problems.append(f"{how}: {name} differs from the reference (max relative error {err:.2e}, {flips} flips)")
    active = np.count_nonzero(want_acts) / want_acts.shape[0]
    print(f"  {how}: {active:.1f} active latents per input on average")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    root = args.run_dir / "sae"
    entry_file = root / RELEASE_FILE
    if not entry_file.is_file():
        print(f"{entry_file}: missing (a run exported by this version writes it)", file=sys.stderr)
        return 1
    entry = yaml.safe_load(entry_file.read_text())
    (release, info), = entry.items()
    repo_id = info["repo_id"]

    import sae_lens
    from sae_lens import SAE

    print(f"sae-lens {sae_lens.__version__}; release {release}, repo {repo_id}")
    place_in_hub_cache(root, repo_id)
    rng = np.random.default_rng(0)
    problems, checked = [], 0
    for sae_entry in info["saes"]:
        sae_id, folder = sae_entry["id"], root / sae_entry["path"]
        cfg = json.loads((folder / "cfg.json").read_text())
        if cfg.get("architecture") != "jumprelu":
            print(f"{sae_id}: skipped, architecture {cfg.get('architecture')} has no SAELens class")
            continue
        weights = load_file(str(folder / "sae_weights.safetensors"))
        print(f"{sae_id}: W_enc {weights['W_enc'].shape}")
        loads = [
            ("load_from_disk", lambda: SAE.load_from_disk(str(folder), device=args.device)),
            ("from_pretrained(repo_id)", lambda: SAE.from_pretrained(repo_id, sae_id, device=args.device)),
            # Registered only now, so that the repository id above is loaded as an unlisted repository.
            ("from_pretrained(release)", lambda: (register_release(entry_file), SAE.from_pretrained(release, sae_id, device=args.device))[1]),
        ]
        for how, load in loads:
            try:
                sae = load()
            except Exception as e:  # report every way that fails, not only the first
                problems.append(f"{sae_id}: {how} failed: {type(e).__name__}: {e}")
                continue
            problems += [f"{sae_id}: {p}" for p in check(sae, weights, how, args.device, rng)]
            checked += 1
    for p in problems:
        print("FAIL", p, file=sys.stderr)
    if checked == 0 and not problems:
        print("no SAELens-loadable SAE in the release", file=sys.stderr)
        return 1
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
