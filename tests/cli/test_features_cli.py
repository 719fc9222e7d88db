"""``odradek features describe|upgrade|downgrade|disable``, like kafka-features.sh: its describe
lines, its messages, and the broker's reason (exit code 1) when a change is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from odradek.testing import BrokerProcess


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60)


def test_features_commands(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        b = ("-b", broker.bootstrap)
        r = odradek("features", "describe", *b)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert (
            "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.0-IV3\t"
            "FinalizedVersionLevel: 4.0-IV3\tEpoch: 0"
        ) in lines
        assert (
            "Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\t"
            "FinalizedVersionLevel: 2\tEpoch: 0"
        ) in lines

        r = odradek("features", "downgrade", "--feature", "transaction.version=1", "--dry-run", *b)
        assert (r.returncode, r.stdout) == (0, "transaction.version can be downgraded to 1.\n"), r.stderr
        r = odradek("features", "upgrade", "--feature", "transaction.version=1", *b)
        assert r.returncode == 1
        assert "Can't downgrade the version of this feature" in r.stderr
        r = odradek("features", "downgrade", "--feature", "transaction.version=1", *b)
        assert (r.returncode, r.stdout) == (0, "transaction.version was downgraded to 1.\n"), r.stderr
        r = odradek("features", "downgrade", "--metadata", "3.3-IV3", *b)
        assert r.returncode == 1 and "might delete metadata information" in r.stderr
        r = odradek("features", "upgrade", "--release-version", "4.0", *b)
        assert r.returncode == 0, r.stderr
        assert "transaction.version was upgraded to 2." in r.stdout
        r = odradek("features", "disable", "--feature", "transaction.version", *b)
        assert (r.returncode, r.stdout) == (0, "transaction.version was disabled.\n"), r.stderr
        r = odradek("features", "describe", *b)
        assert "Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\t" \
               "FinalizedVersionLevel: 0\tEpoch: 3" in r.stdout.splitlines()
