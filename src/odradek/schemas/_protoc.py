"""``.proto`` text compiled by the ``protoc`` that grpcio-tools packages, in a child process.

The compiler runs in a process of its own, never in the caller's: a ``.proto`` file is outside
input, and a compiler crash, a long compile or a large allocation then ends that process, not
the broker.  The child gets the files in a private temporary directory (the import paths the
schema uses, each checked to be a plain relative path), the well-known types of
``google/protobuf`` on its include path, ``timeout`` seconds and ``MAX_MEMORY`` bytes of address
space; it writes the ``FileDescriptorSet`` of the root file and its imports.  Compiler errors
come back as :class:`~odradek.schemas.SchemaError` with protoc's messages.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from odradek.schemas._common import SchemaError

__all__ = ["ROOT_FILE", "compile_proto", "protoc_available"]

#: the file name the schema being compiled is given (Confluent's default name)
ROOT_FILE = "default.proto"
#: how long one compile may take, and how much memory the compiler may map
TIMEOUT_S = 20.0
MAX_MEMORY = 1 << 30
#: the largest ``.proto`` file accepted (the registry's own request limit is smaller)
MAX_SOURCE = 8 << 20

_SAFE_PATH = re.compile(r"[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*")

_CHILD = r"""
import os, resource, sys
limit = int(sys.argv[1])
try:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
except (ValueError, OSError):
    pass
sys.path.insert(0, sys.argv[2])
from grpc_tools import _protoc_compiler
args = [a.encode() for a in sys.argv[3:]]
sys.exit(_protoc_compiler.run_main([b"protoc", *args]))
"""


def _grpc_tools() -> tuple[str, str] | None:
    """(the directory holding ``grpc_tools``, its include directory of well-known types)."""
    try:
        import grpc_tools
    except ImportError:
        return None
    pkg = Path(grpc_tools.__file__).resolve().parent
    return str(pkg.parent), str(pkg / "_proto")


def protoc_available() -> bool:
    return _grpc_tools() is not None


def _check_path(name: str) -> None:
    if (
        not _SAFE_PATH.fullmatch(name)
        or any(part in (".", "..") for part in name.split("/"))
        or len(name) > 512
    ):
        raise SchemaError(f"the import path {name!r} is not a relative path of plain names")


def compile_proto(files: Mapping[str, str], root: str = ROOT_FILE, *, timeout: float = TIMEOUT_S) -> bytes:
    """The serialized ``FileDescriptorSet`` of ``root`` and everything it imports, from
    ``files`` (import path -> ``.proto`` text).  Raises SchemaError with protoc's messages."""
    found = _grpc_tools()
    if found is None:
        raise SchemaError("Protobuf schemas given as .proto text need the grpcio-tools package "
                          "(pip install 'odradek[registry]'); a base64 file descriptor needs no compiler")
    site, include = found
    for name, text in files.items():
        _check_path(name)
        if len(text) > MAX_SOURCE:
            raise SchemaError(f"{name} is larger than {MAX_SOURCE} bytes")
    with tempfile.TemporaryDirectory(prefix="odradek-protoc-") as tmp:
        src = Path(tmp) / "src"
        for name, text in files.items():
            path = src / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        out = Path(tmp) / "out.pb"
        args = [
            sys.executable, "-I", "-S", "-c", _CHILD, str(MAX_MEMORY), site,
            f"-I{src}", f"-I{include}", f"--descriptor_set_out={out}", "--include_imports", root,
        ]
        try:
            proc = subprocess.run(
                args, cwd=tmp, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )
        except subprocess.TimeoutExpired:
            raise SchemaError(f"compiling the schema took more than {timeout:g} s") from None
        except OSError as exc:
            raise SchemaError(f"the Protobuf compiler could not be started: {exc}") from None
        if proc.returncode != 0 or not out.exists():
            text = proc.stderr.decode("utf-8", "replace").replace(str(src) + "/", "").strip()
            if proc.returncode < 0:
                text = text or f"the Protobuf compiler was ended by signal {-proc.returncode}"
            raise SchemaError(text[:4000] or f"the Protobuf compiler failed (exit {proc.returncode})")
        return out.read_bytes()
