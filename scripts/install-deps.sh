#!/usr/bin/env bash
# Installs what hyperoffload needs to build and test, skipping what is present.
# Idempotent: a second run installs nothing and touches no network.
#   scripts/install-deps.sh            Debian packages (scripts/debian-packages.txt)
#   scripts/install-deps.sh --python   also the project's virtual environment .venv
#                                      with python/requirements.txt (PyTorch, pytest, ...)
# The package lists live in those two files only: scripts/check-deps.py reads the
# same files to prove the build used nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."

read_list() { sed -e 's/#.*//' -e 's/[[:space:]]//g' "$1" | grep -v '^$'; }

mapfile -t packages < <(read_list scripts/debian-packages.txt)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} > 0)); then
  echo "install-deps: installing Debian packages ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  # A stale package index makes installs fail with 404s; refresh it once, then install.
  $sudo apt-get update -qq || true
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[[ "${1:-}" == "--python" ]] || exit 0

# The virtual environment: made from the python3 on PATH (3.9 or newer), filled
# from python/requirements.txt. A stamp holding the requirements' checksum makes
# the second run free; editing the file re-runs pip.
venv=.venv
stamp="$venv/.hyperoffload-requirements"
want=$(sha256sum python/requirements.txt | cut -d' ' -f1)
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi
if [[ ! -x "$venv/bin/python" ]]; then
  python=${PYTHON:-python3}
  echo "install-deps: creating $venv with $($python --version 2>&1)"
  if ! $python -m venv "$venv"; then
    echo "install-deps: '$python -m venv' failed; on Debian's own python3, install python3-venv" >&2
    exit 1
  fi
fi
echo "install-deps: installing python/requirements.txt into $venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r python/requirements.txt
echo "$want" >"$stamp"
