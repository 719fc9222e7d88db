"""The checksums: CRC-32C from the crc32c package's extension module, loaded without the package's
``__init__`` (which reads every installed distribution's metadata for its version)."""

from __future__ import annotations

import subprocess
import sys
import zlib

from hypothesis import given
from hypothesis import strategies as st

from odradek.records import crc32, crc32c


def _crc32c_bitwise(data: bytes, value: int = 0) -> int:
    """CRC-32C one bit at a time (reflected polynomial 0x82F63B78): the reference."""
    crc = value ^ 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


@given(st.binary(max_size=300), st.binary(max_size=40))
def test_crc32c_is_castagnolis_and_continues(data: bytes, more: bytes) -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C
    assert crc32c(data) == _crc32c_bitwise(data)
    assert crc32c(more, crc32c(data)) == crc32c(data + more) == _crc32c_bitwise(more, _crc32c_bitwise(data))
    assert crc32c(memoryview(data)) == crc32c(bytearray(data)) == crc32c(data)
    assert crc32(data) == zlib.crc32(data) & 0xFFFFFFFF


def test_loading_the_checksum_reads_no_package_metadata() -> None:
    """A broker's start imports no ``importlib.metadata`` (nor ``email``, ``zipfile``) for the
    crc32c package's version; importing the package afterwards still works, with the same
    function."""
    probe = (
        "import sys\n"
        "import odradek.broker.app, odradek.cli.serve\n"
        "from odradek.records import crc32c\n"
        "print(sorted(m for m in ('importlib.metadata', 'email', 'zipfile', 'crc32c') if m in sys.modules) or '-')\n"
        "import crc32c as package\n"
        "print(package.crc32c is crc32c, package.crc32c(b'123456789') == 0xE3069283, package.__version__ > '')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["-", "True", "True", "True"]
