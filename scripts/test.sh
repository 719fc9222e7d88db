#!/usr/bin/env bash
# The test command: installs everything the suite needs (Debian packages with apt-get, Python
# packages from PyPI into ./.venv),
# then checks generated code, lint, types and layer contracts, and runs the tests.
# Any failing step fails the run; pytest's "no tests ran" (exit 5) is a failure too.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/_setup.sh
echo "== install"
# kcat: a real client for interop tests; zookeeper: the cluster tests; openssl: test certificates;
# an MIT KDC, its tools and Cyrus SASL's GSSAPI plugin (kcat's Kerberos) for the GSSAPI tests, and
# libkrb5-dev to build the gssapi package; chromium: the console's browser tests (driven by Playwright)
# librdkafka-dev (headers) and libjemalloc2: the compiled load generator and its jemalloc runs
apt_install chromium kcat zookeeper openssl krb5-kdc krb5-admin-server krb5-user libkrb5-dev libsasl2-modules-gssapi-mit librdkafka-dev libjemalloc2
odradek_setup test,dev,fast,cluster,registry,docs,tables

echo "== codegen --check"
.venv/bin/python -m tools.codegen --check
echo "== settingsgen --check"
.venv/bin/python -m tools.settingsgen --check
echo "== configdocs --check"
.venv/bin/python -m tools.configdocs --check
echo "== docs (mkdocs build --strict)"
docs_site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$docs_site"
rm -rf "$docs_site"
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy
echo "== import contracts"
.venv/bin/lint-imports
echo "== pytest"
# free space where the tests write (their tmp_path, brokers' logs): a full disk fails them all
df -h . "${TMPDIR:-/tmp}" || true
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci}
set +e
# Four workers (pytest-xdist) on this 2-core machine: most tests wait on brokers, JVMs, ZooKeeper
# sessions and clusters rather than on a core. The same 3,685 tests: 1,190 s on two workers (the CPU
# idle 40 % of the time), 1,111 s on three (39 % idle), 1,018 s on four (34 % idle).
# tests/conftest.py puts the longest directories first. --maxschedchunk 2: a worker is handed two
# tests at a time as it needs them (plain --dist load first hands each worker a quarter of its share
# at once: of ~3,770 tests, one worker got the first 471, every Spark and cluster test among them).
# ODRADEK_TEST_WORKERS=0 runs them serially.
.venv/bin/pytest -p no:cacheprovider -n "${ODRADEK_TEST_WORKERS:-4}" --dist load --maxschedchunk 2 \
  --durations=40 "$@"
rc=$?
set -e
df -h . "${TMPDIR:-/tmp}" || true
if [ "$rc" -eq 5 ]; then
  echo "pytest ran no tests: failing" >&2
  exit 1
fi
exit "$rc"
