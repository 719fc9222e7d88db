#!/usr/bin/env bash
# The test command: installs everything the suite needs into ./.venv (Python packages from PyPI),
# then checks generated code, lint, types and layer contracts, and runs the tests.
# Any failing step fails the run; pytest's "no tests ran" (exit 5) is a failure too.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,dev]'

echo "== codegen --check"
.venv/bin/python -m tools.codegen --check
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy
echo "== import contracts"
.venv/bin/lint-imports
echo "== pytest"
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci}
set +e
.venv/bin/pytest -p no:cacheprovider "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest ran no tests: failing" >&2
  exit 1
fi
exit "$rc"
