"""Checksums: CRC-32 (IEEE) for message sets v0/v1, CRC-32C (Castagnoli) for v2.

Both are computed in C: ``zlib.crc32`` and the ``crc32c`` package, which uses the
SSE4.2 / ARMv8 CRC instructions when the CPU has them. Results are unsigned 32-bit.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["crc32", "crc32c"]

_EXTENSION = "crc32c._crc32c"


def _load_crc32c() -> Callable[..., int]:
    """The ``crc32c`` package's C function, with the extension module loaded on its own.

    The package's ``__init__`` asks ``importlib.metadata`` for its own version, which imports
    ``email``, ``zipfile`` and ``csv`` and reads the installed distributions: about 10 ms and
    1.5 MB of a broker's start, for a ``__version__`` nobody reads.  The extension module needs
    nothing of its package; it is registered under its own name, so a later ``import crc32c``
    uses it.  Should the package's layout change, the package is imported as usual."""
    loaded = sys.modules.get(_EXTENSION)
    if loaded is None:
        package = importlib.util.find_spec("crc32c")  # finds the package, does not import it
        where = package.submodule_search_locations if package is not None else None
        for directory in where or ():
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = Path(directory) / f"_crc32c{suffix}"
                if path.is_file():
                    loader = importlib.machinery.ExtensionFileLoader(_EXTENSION, str(path))
                    spec = importlib.util.spec_from_file_location(_EXTENSION, path, loader=loader)
                    if spec is not None:
                        loaded = importlib.util.module_from_spec(spec)
                        loader.exec_module(loaded)
                        sys.modules[_EXTENSION] = loaded
                    break
            if loaded is not None:
                break
    fn: Any = getattr(loaded, "crc32c", None)
    if fn is None:
        from crc32c import crc32c as fn
    return fn  # type: ignore[no-any-return]


#: CRC-32C of ``data`` as an unsigned 32-bit integer, continuing from ``value``: the package's
#: function itself (it returns an int), no Python call around it (one or two per produced batch)
crc32c: Callable[..., int] = _load_crc32c()


def crc32(data: bytes | bytearray | memoryview) -> int:
    """CRC-32 (the zlib / IEEE 802.3 polynomial) of ``data``, unsigned 32-bit."""
    return zlib.crc32(data) & 0xFFFFFFFF
