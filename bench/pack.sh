#!/usr/bin/env bash
# Builds the CUDA executables one GPU benchmark runs and packs them, stripped and xz'd, into
# .devbin/WORKLOAD/ (git-ignored), which the device call carries. Run on the machine without a GPU,
# from the repository root (seconds when up to date):
#   bash bench/pack.sh WORKLOAD...
# WORKLOAD is the name of its run script, bench/WORKLOAD.sh: activations, attention_train,
# layer_norm_train, linear_train, data_path (also for checkpoint_time.sh and mixing.sh), distributed, gradsparse,
# profk, sae, sae_matryoshka. The build goes to $CARGO_TARGET_DIR (default target-gpu) with the pinned
# CUDA toolchain (tools/cuda-toolchain.sh), release, `--features cuda,bench`.
set -euo pipefail

# pack DEST "CARGO BUILD FLAGS" PACKAGE/TARGET[=NAME] ...: each PACKAGE/TARGET is an integration test,
# a binary or an example of that package by its name, or PACKAGE/lib for its library's unit tests,
# packed as DEST/NAME.xz (NAME defaults to TARGET). A crate's one-binary test suite `it` is packed as
# CRATE_it; the run scripts pick a former test file's tests from it by module (bench/lib.sh module_tests).
pack() {
  local dest=$1 flags=$2
  shift 2
  mkdir -p "$dest"
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target-gpu}
  # shellcheck disable=SC2086 # the flags are words
  tools/cuda-toolchain.sh cargo build --release --features cuda,bench $flags --message-format=json |
    python3 bench/cargo_executables.py "$@" |
    while read -r name exe; do
      strip -o "$dest/$name" "$exe"
      # -6: about 15% smaller than -1, so that the test binaries and the peers' program travel together.
      xz -6 -T2 -f "$dest/$name"
      echo "packed $dest/$name.xz ($(du -h "$dest/$name.xz" | cut -f1))"
    done
}

WORKLOADS="activations attention_train layer_norm_train linear_train data_path distributed gradsparse profk sae sae_matryoshka"
[ $# -gt 0 ] || { echo "usage: bash bench/pack.sh WORKLOAD... ($WORKLOADS)" >&2; exit 2; }
for workload in "$@"; do
  dest=.devbin/$workload
  case $workload in
  activations)
    pack "$dest" "-p gpt2 -p activations --bins --tests --examples" \
      activations/extract activations/forward_bench gpt2/it=gpt2_it gpt2/gpt2 activations/it ;;
  attention_train)
    pack "$dest" "-p gpt2 -p activations --test train_attention --example attention_train_bench" \
      gpt2/train_attention activations/attention_train_bench ;;
  layer_norm_train)
    pack "$dest" "-p gpt2 -p activations --test it --example layer_norm_train_bench" \
      gpt2/it=gpt2_it activations/layer_norm_train_bench ;;
  linear_train)
    pack "$dest" "-p gpt2 -p activations --tests --examples" \
      gpt2/it=gpt2_it gpt2/train_linear activations/linear_train_bench ;;
  data_path)
    pack "$dest" "-p sparsetrain -p activations -p sae --bins --tests --examples" \
      sparsetrain/train-sae sparsetrain/finetune sparsetrain/extract activations/hash_rate \
      activations/it sae/it=sae_it ;;
  distributed)
    # train-sae for the world-size-1 runs, finetune-bench for the exchanges.
    pack "$dest" "-p sparsetrain -p gradsparse --bins" sparsetrain/train-sae gradsparse/finetune-bench ;;
  gradsparse)
    # profk's tests (accumulate, selection), the gradsparse unit tests, the benchmark.
    pack "$dest" "-p profk -p gradsparse --bins --tests" \
      profk/it=profk_it gradsparse/lib=gradsparse_lib gradsparse/finetune-bench ;;
  profk)
    # profk's CUDA tests by name (its params test reads the profk binary of the root package), then
    # the profk CLI.
    pack "$dest" "-p profk --test it --test graph_capture" profk/it=profk_it profk/graph_capture
    pack "$dest" "-p sparsetrain --bin profk" sparsetrain/profk ;;
  sae)
    pack "$dest" "-p sae --bins --tests" sae/it=sae_it sae/sae-bench ;;
  sae_matryoshka)
    # The Matryoshka / crosscoder / aux-k reference tests, the pair-kernel tests, the benchmark; and
    # dictionary_learning's release wheel (dictionary-learning 0.1.0, pure Python, installed there
    # without its dependencies) into .whl/ (git-ignored: carry it too).
    pack "$dest" "-p sae --bins --tests" sae/it=sae_it sae/sae-bench
    mkdir -p .whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
      dictionary-learning==0.1.0
    ls -l .whl ;;
  *)
    echo "bench/pack.sh: unknown workload '$workload' (one of: $WORKLOADS)" >&2
    exit 2 ;;
  esac
done
