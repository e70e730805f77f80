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
# check; not needed to build or run gpubench), GPUBENCH_SETUP_LOG (default BUILD_DIR/setup.log).
#
# Output: a few "setup:" lines on stderr (what it installs, configures and builds, and the build's
# progress: one line rewritten in place on a terminal, a line every 30 s otherwise); the full
# output of apt-get, cmake and the compiler goes to the log, whose last lines are shown when a
# step fails.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${GPUBENCH_BUILD_DIR:-build}
jobs=${GPUBENCH_JOBS:-$(nproc)}
say() { echo "setup: $*" >&2; }
mkdir -p "$build_dir"
log_file=${GPUBENCH_SETUP_LOG:-$build_dir/setup.log}
: > "$log_file"
# Runs a command with its output appended to the log; when it fails, shows the log's last lines.
logged() {
  local rc=0
  "$@" >> "$log_file" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    say "failed (exit $rc): $*; the last lines of $log_file:"
    tail -n 40 "$log_file" >&2
  fi
  return "$rc"
}

torch_prefix=${GPUBENCH_TORCH_PREFIX:-}
if [ -z "$torch_prefix" ] && command -v python3 >/dev/null 2>&1; then
  torch_prefix=$(python3 -c 'import torch; assert torch.version.cuda; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
  [ -n "$torch_prefix" ] && say "using the CUDA libtorch of python3's PyTorch: $torch_prefix"
fi

packages=(cmake ninja-build g++ libcli11-dev nlohmann-json3-dev libfmt-dev libyaml-cpp-dev libgtest-dev)
# Debian's libtorch links the reference BLAS unless an optimized one is installed; OpenBLAS
# makes CPU steps about 10x faster (bert-base at batch 2: 36 s -> 1.9 s on 2 cores).
# libgloo-dev: the gloo headers that libtorch's ProcessGroupGloo.hpp includes, for
# data-parallel runs on the CPU (`run --device cpu --world-size N`, and its tests).
[ -z "$torch_prefix" ] && packages+=(libtorch-dev libopenblas0-pthread libgloo-dev)
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
  if ! { logged $sudo apt-get update -q && logged $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"; }; then
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
  if ! { logged $sudo apt-get update -q && logged $sudo apt-get install -y -q --no-install-recommends chromium; }; then
    say "could not install chromium; the HTML report check will fail (GPUBENCH_SKIP_BROWSER_TESTS=1 skips it)"
  fi
fi

cmake_args=(-S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release)
[ -n "$torch_prefix" ] && cmake_args+=("-DCMAKE_PREFIX_PATH=$torch_prefix")
if [ -n "$torch_prefix" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  cmake_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
if [ ! -f "$build_dir/build.ninja" ] || [ -n "$torch_prefix" ]; then
  say "configuring $build_dir (cmake; log: $log_file)"
  logged cmake "${cmake_args[@]}"
fi

target=${GPUBENCH_TARGET:-gpubench}
say "building $target with $jobs jobs (log: $log_file)"
started=$(date +%s)
# Ninja's "[done/total] ..." lines become one progress line (rewritten on a terminal, every 30 s
# otherwise); everything goes to the log.
set +e
cmake --build "$build_dir" -j "$jobs" --target "$target" 2>&1 | tee -a "$log_file" | {
  tty=0
  [ -t 2 ] && tty=1
  last=$started
  while IFS= read -r line; do
    case $line in
      \[*/*\]*) ;;
      *) continue ;;
    esac
    step=${line%%]*}]
    now=$(date +%s)
    if [ "$tty" = 1 ]; then
      printf '\rsetup: building %s %d s' "$step" $((now - started)) >&2
    elif [ $((now - last)) -ge 30 ]; then
      say "building $step after $((now - started)) s"
      last=$now
    fi
  done
  [ "$tty" = 1 ] && printf '\n' >&2
  true
}
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  say "the build failed (exit $rc); the last lines of $log_file:"
  tail -n 40 "$log_file" >&2
  exit "$rc"
fi
say "built $build_dir/gpubench ($target) in $(( $(date +%s) - started )) s"
