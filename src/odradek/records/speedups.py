"""Which record decoder runs: the compiled one, or the pure-Python one.

:mod:`odradek.records._speedups` is a C extension built at install when a compiler is there
(``setup.py``; optional).  When it is importable, :func:`~odradek.records.decode_records` (the
clients' consumers) and the Spark source's column decoder use it for the records of each v2
batch; data it finds anything wrong with is decoded again by the pure-Python decoder, which
raises the precise error.  The producer's open batches (:mod:`odradek.records.appender`) and the
broker's check of every record on append (:mod:`odradek.records.check`) are compiled too.  ``ODRADEK_PURE_PYTHON=1`` in the environment (read at import) turns
it off, for comparison or when in doubt.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["PURE_PYTHON_ENV", "compiled", "implementation"]

PURE_PYTHON_ENV = "ODRADEK_PURE_PYTHON"


def _load() -> ModuleType | None:
    if os.environ.get(PURE_PYTHON_ENV, "").strip().lower() not in ("", "0", "false", "no"):
        return None
    try:
        from odradek.records import _speedups  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _speedups


#: the compiled module, or None (not built, or turned off)
compiled: ModuleType | None = _load()


def implementation() -> str:
    """``"compiled"`` or ``"pure-python"``: the decoder in use."""
    return "compiled" if compiled is not None else "pure-python"
