#!/usr/bin/env bash
# Installs what is missing, then configures and builds gpubench (Release, Ninja). Idempotent:
# a second run only rebuilds what changed. Works on a fresh Debian 12 or Ubuntu 24.04, and on a
# machine that already has everything (such as the GPU machine, where nothing can be installed).
#
# Which libtorch:
#   GPUBENCH_TORCH_PREFIX=/path      a libtorch archive or any Torch CMake prefix
#   else a CUDA build of PyTorch for python3, if there is one (torch.utils.cmake_prefix_path)
#   else Debian/Ubuntu's libtorch-dev (CPU), installed if missing
# Other settings: GPUBENCH_BUILD_DIR (default build), GPUBENCH_JOBS (default: all cores),
# GPUBENCH_TARGET (default: gpubench, the executable alone; `all` also builds the test binary,
# as scripts/test.sh asks),
# GPUBENCH_WITH_BROWSER=1 (set by scripts/test.sh: also install Chromium, for the HTML report
# check; not needed to build or run gpubench).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${GPUBENCH_BUILD_DIR:-build}
jobs=${GPUBENCH_JOBS:-$(nproc)}
say() { echo "setup: $*" >&2; }

torch_prefix=${GPUBENCH_TORCH_PREFIX:-}
if [ -z "$torch_prefix" ] && command -v python3 >/dev/null 2>&1; then
  torch_prefix=$(python3 -c 'import torch; assert torch.version.cuda; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
  [ -n "$torch_prefix" ] && say "using the CUDA libtorch of python3's PyTorch: $torch_prefix"
fi

packages=(cmake ninja-build g++ libcli11-dev nlohmann-json3-dev libfmt-dev libyaml-cpp-dev libgtest-dev)
# Debian's libtorch links the reference BLAS unless an optimized one is installed; OpenBLAS
# makes CPU steps about 10x faster (bert-base at batch 2: 36 s -> 1.9 s on 2 cores).
[ -z "$torch_prefix" ] && packages+=(libtorch-dev libopenblas0-pthread)
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  say "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if ! { $sudo apt-get update -q && $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"; } >&2; then
    say "could not install ${missing[*]}; trying to build with what is there"
  fi
fi

# Chromium for the test path only, installed on its own so that a system without the package
# (Ubuntu ships it as a snap) still gets the build dependencies above.
if [ "${GPUBENCH_WITH_BROWSER:-0}" = 1 ] && command -v dpkg-query >/dev/null 2>&1 &&
  ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed"; then
  say "installing: chromium (for the HTML report check)"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if ! { $sudo apt-get update -q && $sudo apt-get install -y -q --no-install-recommends chromium; } >&2; then
    say "could not install chromium; the HTML report check will fail (GPUBENCH_SKIP_BROWSER_TESTS=1 skips it)"
  fi
fi

cmake_args=(-S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release)
[ -n "$torch_prefix" ] && cmake_args+=("-DCMAKE_PREFIX_PATH=$torch_prefix")
if [ -n "$torch_prefix" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  cmake_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
if [ ! -f "$build_dir/build.ninja" ] || [ -n "$torch_prefix" ]; then
  cmake "${cmake_args[@]}" >&2
fi
cmake --build "$build_dir" -j "$jobs" --target "${GPUBENCH_TARGET:-gpubench}" >&2
say "built $build_dir/gpubench"
