#!/usr/bin/env bash
# Fills .cache/ (git-ignored) with what a machine without network needs to build msa:
# the pinned nvidia-cutlass wheel (by package name, from PyPI) and GoogleTest sources (from
# the system's /usr/src/googletest, Debian's libgtest-dev / googletest package).
set -eu
cd "$(dirname "$0")/.."
version=$(sed -n 's/^set(MSA_CUTLASS_VERSION "\([^"]*\)".*/\1/p' CMakeLists.txt)
mkdir -p .cache/cutlass
ls .cache/cutlass/nvidia_cutlass-"$version"-*.whl > /dev/null 2>&1 ||
  python3 -m pip download --no-deps --quiet --dest .cache/cutlass "nvidia-cutlass==$version"
if [ ! -d .cache/googletest ] && [ -d /usr/src/googletest ]; then
  cp -r /usr/src/googletest .cache/googletest
fi
du -sh .cache/*
