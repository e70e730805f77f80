#!/usr/bin/env bash
# Configures the fuzz + sanitizer build folder (cmake/Fuzz.cmake) once: clang, ASan + UBSan,
# libFuzzer coverage, no models. Used by scripts/dev/fuzz.sh and scripts/dev/sanitize.sh.
#   scripts/dev/configure_fuzz.sh [DIR]   (default build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-build-fuzz}
[ -f "$dir/build.ninja" ] && exit 0
# clang and its libFuzzer runtime (Debian: clang, and libclang-rt-N-dev from clang 14 on),
# through sudo when not root, as setup.sh installs.
apt_install() {
  command -v apt-get >/dev/null || return 1
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
  elif command -v sudo >/dev/null; then
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
  else
    return 1
  fi
}
if ! command -v clang++ >/dev/null; then apt_install clang >/dev/null || true; fi
command -v clang++ >/dev/null || { echo "clang++ missing: apt-get install clang" >&2; exit 1; }
if [ ! -f "$(clang++ -print-resource-dir)/lib/linux/libclang_rt.fuzzer-x86_64.a" ]; then
  v=$(clang++ -dumpversion | cut -d. -f1)
  apt_install "libclang-rt-$v-dev" >/dev/null 2>&1 || true
fi
CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DGPUBENCH_FUZZ=ON -DGPUBENCH_SANITIZE=ON \
  -DGPUBENCH_BUILD_TESTS=OFF -DGPUBENCH_USE_PCH=OFF -DGPUBENCH_UNITY_BUILD=OFF \
  -DCMAKE_BUILD_TYPE=None >/dev/null
