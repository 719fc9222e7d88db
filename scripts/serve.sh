#!/usr/bin/env bash
# The run command: installs Odradek into ./.venv and starts a single-node broker on its
# embedded defaults (127.0.0.1:9092, data in ./odradek-data, no ZooKeeper). Extra arguments go
# to `odradek serve` (e.g. --port 19092, --override num.partitions=3, --config server.properties).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_setup.sh
odradek_setup fast,registry,telemetry
exec .venv/bin/odradek serve "$@"
