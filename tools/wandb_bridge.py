#!/usr/bin/env python3
"""Weights & Biases bridge for sparsetrain runs.

live    reads metrics records (the JSON lines of metrics.jsonl) on stdin and logs them to one W&B run;
        the training binaries start it themselves when the config says `[log] wandb = true`.
replay  logs a finished (or interrupted) run directory's metrics.jsonl to W&B:
            python3 tools/wandb_bridge.py replay runs/tiny-profk-20261130-013000
artifact
        logs a folder of a run (train-sae: RUN_DIR/sae, the SAE in SAELens' layout) as an artifact of
        the run's W&B run (resumed by its id); train-sae calls it at the end of a run.

Runs of one config share a W&B group (the config name) and are told apart by a tag (the selector kind).
Every metric is charted over `tokens` (training tokens seen), defined as the x-axis metric.
An evaluation record whose run directory holds `latent_density/step-XXXXXXXX.json` (train-sae's held-out
evaluation) is logged with `eval/latent_density`, the histogram of the latents' log10 densities.
Offline: WANDB_MODE=offline (or --mode offline) writes a local run under RUN_DIR/wandb/ that
`wandb sync RUN_DIR/wandb/offline-run-*` uploads later.

Exit status 3: the wandb package could not be imported (pip install -r tools/requirements-wandb.txt).
"""

import argparse
import json
import math
import os
import signal
import sys

EXIT_NO_WANDB = 3


def import_wandb():
    try:
        import wandb
    except ImportError as e:
        print(
            f"wandb_bridge: cannot import wandb ({e}); "
            "install it with: pip install -r tools/requirements-wandb.txt",
            file=sys.stderr,
        )
        sys.exit(EXIT_NO_WANDB)
    return wandb


def to_wandb(record):
    """A metrics record as (step, {name: value}); metric names get the record kind as a prefix."""
    kind = record.get("kind", "train")
    data = {
        f"{kind}/{name}": (math.nan if value is None else value)
        for name, value in record.get("metrics", {}).items()
    }
    data["tokens"] = record.get("tokens", 0)
    data["wall_s"] = record.get("wall_s", 0.0)
    return int(record["step"]), data


def latent_density_path(run_dir, step):
    """train-sae's histogram of the latents' densities at the evaluation of `step` (eval::latent_density)."""
    return os.path.join(run_dir, "latent_density", f"step-{step:08d}.json")


def latent_density_histogram(wandb, run_dir, record):
    """The W&B histogram of an eval record's latent densities, or None without one."""
    if run_dir is None or record.get("kind") != "eval":
        return None
    density = read_json(latent_density_path(run_dir, int(record["step"])))
    if not density:
        return None
    return wandb.Histogram(np_histogram=(density["counts"], density["log10_edges"]))


def read_json(path):
    if path and os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return None


def start_run(wandb, args, config):
    if args.mode:
        os.environ["WANDB_MODE"] = args.mode
    tags = [t for t in (args.tags or "").split(",") if t]
    os.makedirs(args.dir, exist_ok=True)
    run = wandb.init(
        project=args.project,
        entity=args.entity or None,
        group=args.group or None,
        name=args.name or None,
        tags=tags or None,
        dir=args.dir,
        config=config or {},
        id=args.id or None,
        resume="allow" if args.id else None,
    )
    define_axes(run)
    return run


def define_axes(run):
    """Training tokens as the x axis of every chart (runs of different batch sizes line up); the
    optimizer step stays W&B's own step."""
    run.define_metric("tokens")
    run.define_metric("*", step_metric="tokens")


def describe(run):
    offline = getattr(run, "offline", False) or os.environ.get("WANDB_MODE") in ("offline", "dryrun")
    if offline:
        run_dir = os.path.dirname(os.path.abspath(run.dir))
        return f"offline run in {run_dir} (upload later with: wandb sync {run_dir})"
    return f"{run.url}" if getattr(run, "url", None) else f"run {run.id}"


def log_records(run, lines, wandb=None, run_dir=None):
    """Logs each JSON line; returns the number logged. W&B needs non-decreasing steps: older ones are
    skipped (a resumed run re-logs the steps after its last checkpoint). With `run_dir`, an eval
    record gets its latent-density histogram (see latent_density_histogram)."""
    last_step, logged = -1, 0
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
            step, data = to_wandb(record)
        except (ValueError, KeyError, TypeError) as e:
            print(f"wandb_bridge: skipping malformed record {number}: {e}", file=sys.stderr)
            continue
        if step < last_step:
            print(f"wandb_bridge: skipping step {step} logged after step {last_step}", file=sys.stderr)
            continue
        if wandb is not None:
            try:
                histogram = latent_density_histogram(wandb, run_dir, record)
            except (ValueError, KeyError, TypeError) as e:
                print(f"wandb_bridge: skipping the latent densities of step {step}: {e}", file=sys.stderr)
                histogram = None
            if histogram is not None:
                data["eval/latent_density"] = histogram
        run.log(data, step=step)
        last_step, logged = step, logged + 1
    return logged


def live(args):
    # Ctrl-C goes to the training loop, which closes our stdin when it has checkpointed.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Keep stdout for the one-line handshake; everything the wandb client prints goes to stderr.
    handshake = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    wandb = import_wandb()
    config = read_json(args.config_json)
    run = start_run(wandb, args, config)
    handshake.write(f"ready {describe(run)}\n")
    handshake.flush()
    log_records(run, sys.stdin, wandb, args.dir)
    run.finish()


def replay(args):
    wandb = import_wandb()
    meta = read_json(os.path.join(args.run_dir, "run.json")) or {}
    metrics_path = os.path.join(args.run_dir, "metrics.jsonl")
    if not os.path.exists(metrics_path):
        sys.exit(f"wandb_bridge: {metrics_path} does not exist")
    name = args.name or meta.get("name") or os.path.basename(os.path.normpath(args.run_dir))
    args.name = name
    args.group = args.group or meta.get("config_name") or name
    tags = [meta.get("selector"), meta.get("task")] + (args.tags or "").split(",")
    args.tags = ",".join(t for t in tags if t)
    args.dir = args.dir or args.run_dir
    args.id = None
    config = read_json(os.path.join(args.run_dir, "config.json")) or {}
    run = start_run(wandb, args, config)
    with open(metrics_path) as f:
        logged = log_records(run, f, wandb, args.run_dir)
    print(f"wandb_bridge: logged {logged} records from {metrics_path} to {describe(run)}")
    run.finish()


def artifact(args):
    if not os.path.isdir(args.path):
        sys.exit(f"wandb_bridge: {args.path} is not a directory")
    wandb = import_wandb()
    run = start_run(wandb, args, read_json(args.config_json))
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in f"{args.artifact_name}-{run.id}")
    art = wandb.Artifact(name, type=args.artifact_type)
    art.add_dir(args.path)
    run.log_artifact(art)
    print(f"wandb_bridge: logged {args.path} as artifact {name} to {describe(run)}")
    run.finish()


def main(argv):
    parser = argparse.ArgumentParser(prog="wandb_bridge.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--project", default="sparsetrain")
    common.add_argument("--entity")
    common.add_argument("--group", help="W&B group (default: the config name)")
    common.add_argument("--name", help="W&B run name")
    common.add_argument("--tags", help="comma-separated tags")
    common.add_argument("--mode", choices=["online", "offline", "disabled"], help="sets WANDB_MODE")
    live_p = sub.add_parser("live", parents=[common], help="log records read on stdin")
    live_p.add_argument("--dir", default=".", help="where wandb keeps its files")
    live_p.add_argument("--config-json", help="resolved config to attach to the W&B run")
    live_p.add_argument("--id", help="W&B run id (a resumed run continues it)")
    replay_p = sub.add_parser("replay", parents=[common], help="log a run directory's metrics.jsonl")
    replay_p.add_argument("run_dir")
    replay_p.add_argument("--dir", help="where wandb keeps its files (default: the run directory)")
    art_p = sub.add_parser("artifact", parents=[common], help="log a folder as an artifact of a run")
    art_p.add_argument("path", help="the folder, e.g. RUN_DIR/sae")
    art_p.add_argument("--dir", default=".", help="where wandb keeps its files")
    art_p.add_argument("--config-json", help="resolved config of the run")
    art_p.add_argument("--id", help="W&B run id of the run to add it to")
    art_p.add_argument("--artifact-name", default="sae", help="artifact name (the run id is appended)")
    art_p.add_argument("--artifact-type", default="model")
    args = parser.parse_args(argv)
    {"live": live, "replay": replay, "artifact": artifact}[args.command](args)


if __name__ == "__main__":
    main(sys.argv[1:])
