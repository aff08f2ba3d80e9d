#!/usr/bin/env bash
# Builds the CUDA binaries that bench/sae_matryoshka.sh runs and packs them, stripped and xz'd, into
# .devbin/sae-m/, and downloads dictionary_learning's release wheel (dictionary-learning 0.1.0, pure
# Python, installed there without its dependencies) into .whl/ (run here, on the machine without a GPU,
# from the repository root; both folders are git-ignored: name them in the device call's carry):
#   bash bench/sae_matryoshka_pack.sh
set -euo pipefail
. bench/pack.sh
# The Matryoshka / crosscoder / aux-k reference tests, the pair-kernel tests, the benchmark.
pack .devbin/sae-m "-p sae --bins --tests" sae/matryoshka sae/sparse_ops sae/sae-bench
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .whl dictionary-learning==0.1.0
ls -l .whl
