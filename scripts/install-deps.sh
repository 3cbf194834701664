#!/usr/bin/env bash
# Installs the Debian packages feedline needs to build and test, skipping those already present.
# Idempotent; needs root (or sudo). Usage: scripts/install-deps.sh [--test]
#   --test  also the tools the test suite and benchmarks use (fio, clang for sanitizers/fuzzing;
#           clang-format for the format check; GNU time for the robustness tests' memory bounds;
#           python3-xxhash, python3-zstandard, zstd and tar for the pipeline CLI tests; for the S3/HTTP
#           tests and benches: nginx, aws-cli 2, boto3/botocore (the independent SigV4 check),
#           rclone, curl, openssl, and node + npm for s3rver (installed by tests/servers/setup.sh);
#           nfs-ganesha and libnfs-utils (nfs-cat) for the NFS tests and bench/compare-nfs.sh;
#           ccache, which scripts/test.sh puts in front of the compilers, and mold, the linker it uses; pytest and torch (CPU) for
#           the Python binding's tests; python3-crc32c, the independent TFRecord CRC32C of
#           tests/cli/formats.sh). The build itself takes python3-dev, pybind11-dev,
#           libdlpack-dev and numpy for the Python package (python/), and libisal-dev (ISA-L) for
#           TFRecord's CRC32C and npz's CRC-32, prometheus-cpp-dev for the metrics endpoint, and
#           libjpeg62-turbo-dev (libjpeg-turbo) and libexif-dev for JPEG images. Also for the
#           tests and bench/compare-jpeg.sh: python3-pil and python3-torchvision, the reference
#           decoder and crops.
#           Also for the tests: prometheus (promtool) and python3-prometheus-client to check what
#           the endpoint serves, chromium to render the HTML report headless.
set -euo pipefail

pkgs=(build-essential cmake ninja-build pkg-config liburing-dev libboost-dev libzstd-dev
      libcurl4-openssl-dev catch2 nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libfmt-dev
      libxxhash-dev libnfs-dev libpugixml-dev python3-dev pybind11-dev libdlpack-dev python3-numpy
      libisal-dev libjpeg62-turbo-dev libexif-dev libopenmpi-dev openmpi-bin prometheus-cpp-dev)
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(ccache mold fio util-linux time python3 gzip clang-16 libclang-rt-16-dev clang-format python3-xxhash python3-zstandard python3-crc32c zstd tar
         nginx awscli python3-boto3 python3-botocore rclone curl openssl
         nfs-ganesha nfs-ganesha-vfs libnfs-utils python3-pytest python3-torch python3-pil python3-torchvision
         python3-venv python3-pip python3-wheel
         prometheus python3-prometheus-client chromium)
  # node may come from elsewhere (nodesource's nodejs package ships its own npm, and conflicts with
  # Debian's npm): install Debian's only when the command is missing.
  command -v node >/dev/null || pkgs+=(nodejs)
  command -v npm >/dev/null || pkgs+=(npm)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "installing: ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
