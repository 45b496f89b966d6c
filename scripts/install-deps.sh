#!/usr/bin/env bash
# Installs the Debian packages hyperoffload needs to build and test, skipping those
# already present. Idempotent: a second run installs nothing and touches no network.
#   scripts/install-deps.sh            build + C++ test dependencies
#   scripts/install-deps.sh --python   also the Python/PyTorch test dependencies
set -euo pipefail

packages=(
  cmake ninja-build g++ make pkg-config time
  libgtest-dev libgmock-dev libbenchmark-dev
  libsimdjson-dev nlohmann-json3-dev libfmt-dev libcli11-dev
  pybind11-dev python3-dev python3-pybind11
)
if [[ "${1:-}" == "--python" ]]; then
  packages+=(python3-torch python3-torchvision python3-pytest python3-numpy)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# A stale package index makes installs fail with 404s; refresh it once, then install.
$sudo apt-get update -qq || true
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
