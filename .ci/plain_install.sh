#!/usr/bin/env bash
# CI step: install accel WITHOUT extras into a fresh virtual environment (no system site-packages,
# so nothing installed elsewhere can hide a missing dependency) and train, save and load there.
# It installs a copy of the package's own files (not the checkout, so no build output is left in
# it) and runs .ci/plain_install_check.py from outside the source tree, so `import accel` is the
# installed package.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/src" "$work/run"
cp -r accel pyproject.toml README.md "$work/src/"
python -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet torch==2.13.0 "$work/src"
cd "$work/run"
"$work/venv/bin/accel" --version
"$work/venv/bin/python" "$repo/.ci/plain_install_check.py" --plain
