# Sourced by the bench/*_pack.sh scripts (run here, on the machine without a GPU, from the repository
# root): builds CUDA executables and packs them, stripped and xz'd, into a git-ignored folder that a
# device call carries.
#   pack DEST "CARGO BUILD FLAGS" PACKAGE/TARGET[=NAME] ...
# Each PACKAGE/TARGET is an integration test, a binary or an example of that package by its name, or
# PACKAGE/lib for its library's unit tests, packed as DEST/NAME.xz (NAME defaults to TARGET). The
# build goes to $CARGO_TARGET_DIR (default target-gpu) with the pinned CUDA toolchain
# (tools/cuda-toolchain.sh), release, `--features cuda,bench`.
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
