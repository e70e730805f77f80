#!/usr/bin/env bash
# Compiles sources with -fsyntax-only against libtorch 2.x headers and CUDA's headers, with
# GPUBENCH_WITH_CUDA=1 and GPUBENCH_CUDA_KERNELS=1 (as the GPU machine builds, with nvcc): a
# cheap check, on a machine without a GPU, that the code builds against the GPU machine's
# libtorch (2.11) as well as Debian 12's 1.13. Catches API drift before a GPU call is spent on a
# failed build.
#
#   scripts/dev/check_torch2.sh [FILE.cpp ...]     (default: every source of the build)
#
# Needs libtorch 2.x headers (GPUBENCH_TORCH2_INCLUDE, default /work/torch26/usr/include: Debian
# trixie's libtorch-dev 2.6 unpacked with dpkg -x) and CUDA's headers (GPUBENCH_CUDA_INCLUDE,
# default /usr/local/cuda/include). Headers that a CUDA build of libtorch generates and the CPU
# package lacks come from GPUBENCH_TORCH2_STUBS (default /work/torch26/stub:
# c10/cuda/impl/cuda_cmake_macros.h, one #define C10_CUDA_BUILD_SHARED_LIBS). With trixie's
# libgloo-dev and libnccl-dev (non-free) unpacked into the same folder, src/distributed/comm.cpp
# compiles both its ProcessGroupGloo and its ProcessGroupNCCL paths (compat.h's c10d section
# enables each where its headers are found). Not part of CI:
# trixie's headers are not on a Debian 12 box.
set -euo pipefail
cd "$(dirname "$0")/../.."
torch_inc=${GPUBENCH_TORCH2_INCLUDE:-/work/torch26/usr/include}
cuda_inc=${GPUBENCH_CUDA_INCLUDE:-/usr/local/cuda/include}
stub_inc=${GPUBENCH_TORCH2_STUBS:-/work/torch26/stub}
[ -d "$torch_inc/torch" ] || { echo "check_torch2: no libtorch 2.x headers at $torch_inc" >&2; exit 2; }
[ -d "$cuda_inc" ] || { echo "check_torch2: no CUDA headers at $cuda_inc" >&2; exit 2; }
if [ $# -eq 0 ]; then
  mapfile -t files < <(ls src/*.cpp src/report/*.cpp src/train/*.cpp src/cli/*.cpp models/*.cpp tests/*.cpp 2>/dev/null)
else
  files=("$@")
fi
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
failed=0
for f in "${files[@]}"; do
  if ! g++ -std=c++17 -fsyntax-only -DGPUBENCH_WITH_CUDA=1 -DGPUBENCH_CUDA_KERNELS=1 \
      -Wno-deprecated-declarations \
      -I include -I . -I "$torch_inc" -I "$torch_inc/torch/csrc/api/include" -I "$cuda_inc" -I "$stub_inc" \
      "$f" 2> "$gen/err"; then
    echo "FAIL $f" >&2
    head -30 "$gen/err" >&2
    failed=1
  fi
done
[ $failed = 0 ] && echo "check_torch2: ${#files[@]} files compile against $torch_inc" >&2
exit $failed
