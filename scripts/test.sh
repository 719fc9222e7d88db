#!/usr/bin/env bash
# The test command: installs everything the suite needs (Debian packages with apt-get, Python
# packages from PyPI into ./.venv),
# then checks generated code, lint, types and layer contracts, and runs the tests.
# Any failing step fails the run; pytest's "no tests ran" (exit 5) is a failure too.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/_setup.sh
echo "== install"
apt_install kcat zookeeper openssl  # kcat: a real client for interop tests; zookeeper: the cluster tests; openssl: test certificates
odradek_setup test,dev,fast,cluster

echo "== codegen --check"
.venv/bin/python -m tools.codegen --check
echo "== configdocs --check"
.venv/bin/python -m tools.configdocs --check
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
