#!/usr/bin/env bash
# The build's Debian 12 packages for a GPU machine that lacks them and cannot fetch (the device tool's image
# has CUDA, CMake and ninja, but no boost, protobuf, eigen, nlohmann-json, gtest or benchmark).
#
#   scripts/gpu_deps.sh fetch            here, where apt works: downloads the .deb files into .gpu_debs/
#                                        (git-ignored; ~16 MB) to carry with the working tree
#   source scripts/gpu_deps.sh unpack    there: unpacks them under $CRL_DEPS (default /opt/crl-deps), never
#                                        onto /, and exports CMAKE_PREFIX_PATH, PATH and LD_LIBRARY_PATH so that
#                                        CMake, protoc and the test binaries find them
#
# scripts/gpu_check.sh runs the second step itself when .gpu_debs/ is there. The packages' shared libraries
# need glibc 2.36 or newer (Debian 12's).
# (Strict mode only when run: sourced, it would stay set in the caller's shell.)
[ "${BASH_SOURCE[0]}" != "$0" ] || set -euo pipefail

CRL_GPU_DEBS=(
  libboost1.74-dev
  libboost-program-options1.74-dev libboost-program-options1.74.0
  libboost-context1.74-dev libboost-context1.74.0
  libeigen3-dev nlohmann-json3-dev
  libprotobuf-dev libprotobuf32 libprotoc32 protobuf-compiler
  libgtest-dev libgmock-dev
  libbenchmark-dev libbenchmark1debian
)

gpu_deps_fetch() {
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  mkdir -p "$root/.gpu_debs"
  # amd64 whatever this machine is, with lists of its own (the device README's way of fetching .deb files).
  local lists=/tmp/crl-gpu-debs-lists
  mkdir -p "$lists/partial"
  local o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$lists")
  apt-get "${o[@]}" update -qq
  (cd "$root/.gpu_debs" && apt-get "${o[@]}" download "${CRL_GPU_DEBS[@]}")
  echo "gpu_deps: $(ls "$root/.gpu_debs" | wc -l) packages, $(du -sh "$root/.gpu_debs" | cut -f1), in .gpu_debs/"
}

gpu_deps_unpack() {
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  local prefix="${CRL_DEPS:-/opt/crl-deps}"
  local debs=("$root"/.gpu_debs/*.deb)
  if [ ! -e "${debs[0]}" ]; then
    echo "gpu_deps: no .deb files in $root/.gpu_debs (run scripts/gpu_deps.sh fetch where apt works)" >&2
    return 1
  fi
  mkdir -p "$prefix"
  for deb in "${debs[@]}"; do dpkg -x "$deb" "$prefix"; done
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PATH="$prefix/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "gpu_deps: ${#debs[@]} packages unpacked under $prefix"
}

case "${1:-}" in
  fetch) gpu_deps_fetch ;;
  unpack) gpu_deps_unpack ;;
  *)
    echo "usage: scripts/gpu_deps.sh fetch | source scripts/gpu_deps.sh unpack" >&2
    # (sourced with no argument: defines the functions only)
    [ "${BASH_SOURCE[0]}" != "$0" ] || exit 2
    ;;
esac
