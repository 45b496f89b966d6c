#!/usr/bin/env bash
# `pip install --no-build-isolation .` into a new virtual environment, then, from
# another directory and with no PYTHONPATH: `import hyperoffload`, one offloaded
# step, and `hyperoffload --help` from the environment's bin/.
#   scripts/test-pip-install.sh            (make test-pip)
# The new environment sees the project's .venv (PyTorch, scikit-build-core,
# pybind11) through a .pth file instead of installing PyTorch a second time;
# the build directory is kept in build/pip so a second run is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
[[ -x .venv/bin/python ]] || scripts/install-deps.sh --python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
"$python" -m venv "$work/venv"
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/project-venv.pth"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
  --config-settings=build-dir="$repo/build/pip" "$repo"
cd "$work"
env -u PYTHONPATH "$work/venv/bin/python" - "$work/venv" <<'PY'
import pathlib, sys
import torch
import hyperoffload as ho
where = pathlib.Path(ho.__file__).resolve()
assert str(where).startswith(str(pathlib.Path(sys.argv[1]).resolve())), f"imported from {where}"
assert (where.parent / "py.typed").exists(), "py.typed is not installed"
x = torch.randn(64, 64, requires_grad=True)
session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=5 * 64 * 64 * 4))
for _ in range(3):
    with session:
        y = x.relu().exp().sigmoid().tanh().sum()
        y.backward()
print(f"pip-install: import hyperoffload from {where.parent}; {session.summary()}")
PY
"$work/venv/bin/hyperoffload" --help >/dev/null
"$work/venv/bin/hyperoffload" --version
echo "pip-install: 1 passed, 0 failed"
