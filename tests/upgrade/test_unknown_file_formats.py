"""Files of a log dir in a format version this Odradek does not read (a newer Odradek's, another
program's) are refused with a message naming the file, the version found and the versions this
Odradek reads, and nothing is changed: no truncation, no deleted snapshot, no rewritten file.
Malformed checkpoint and meta.properties content gets a clear error, never a crash."""

from __future__ import annotations

import json
import shutil
import struct
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.broker.app import _read_meta
from odradek.config import ConfigError
from odradek.coordination.embedded import EmbeddedBackend, MetadataStoreError
from odradek.storage import LogManager, StorageError
from odradek.storage.checkpoint import read_epochs, read_offsets
from odradek.storage.errors import UnknownFormatError

FIXTURE = Path(__file__).parent.parent / "fixtures" / "upgrade" / "odradek-d65ee6b.tar.gz"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fixture")
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(root, filter="data")
    return root / "data"


@pytest.fixture
def data(pristine: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "data"))


def snapshot_of(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.suffix != ".lock"}


def load(d: Path) -> None:
    manager = LogManager([d], {"segment.bytes": 4096})
    manager.close()


def test_the_fixture_loads(data: Path) -> None:
    load(data)


@pytest.mark.parametrize("name", ["recovery-point-offset-checkpoint", "plain-0/leader-epoch-checkpoint"])
def test_a_checkpoint_of_an_unknown_version_is_refused(data: Path, name: str) -> None:
    path = data / name
    path.write_text("1" + path.read_text()[1:])
    with pytest.raises(UnknownFormatError) as caught:
        load(data)
    assert str(path) in caught.value.message
    assert "checkpoint format version 1 is not one this Odradek reads (it reads 0)" in caught.value.message
    assert path.read_text().startswith("1\n")


def test_a_producer_snapshot_of_an_unknown_version_is_refused_and_kept(data: Path) -> None:
    path = data / "plain-0" / "00000000000000000150.snapshot"
    raw = path.read_bytes()
    path.write_bytes(struct.pack(">h", 3) + raw[2:])
    (data / ".kafka_cleanshutdown").unlink()
    with pytest.raises(UnknownFormatError) as caught:
        load(data)
    assert f"{path}: producer state snapshot format version 3 is not one this Odradek reads (it reads 1 and 2)" in (
        caught.value.message
    )
    assert path.read_bytes()[2:] == raw[2:]


def append_magic3(segment: Path) -> int:
    """Append a whole entry of magic 3 at the next offset; returns that offset."""
    raw = segment.read_bytes()
    pos = nxt = 0
    while pos < len(raw):
        base, length = struct.unpack_from(">qi", raw, pos)
        (last_delta,) = struct.unpack_from(">i", raw, pos + 23)
        nxt = base + last_delta + 1
        pos += 12 + length
    entry = bytearray(struct.pack(">qi", nxt, 49) + bytes(49))
    entry[16] = 3
    segment.write_bytes(raw + entry)
    return nxt


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_a_record_batch_of_an_unknown_magic_is_refused_not_truncated(data: Path, clean: bool) -> None:
    segment = data / "plain-0" / "00000000000000000100.log"
    offset = append_magic3(segment)
    if not clean:
        (data / ".kafka_cleanshutdown").unlink()
    before = segment.read_bytes()
    with pytest.raises(UnknownFormatError) as caught:
        load(data)
    assert caught.value.message.startswith(
        f"{segment} at position {len(before) - 61} (offset {offset}): record batch format (magic byte) version 3 "
        "is not one this Odradek reads (it reads magic 0, 1 and 2)"
    )
    assert segment.read_bytes() == before


def test_meta_properties_of_an_unknown_version_is_refused(data: Path) -> None:
    path = data / "meta.properties"
    path.write_text(path.read_text().replace("version=0", "version=1"))
    before = path.read_bytes()
    with pytest.raises(ConfigError, match=r"meta.properties: version 1 is not one this Odradek reads \(it reads 0\)"):
        _read_meta(data)
    assert path.read_bytes() == before


def test_a_metadata_store_of_an_unknown_format_version_is_refused(data: Path) -> None:
    path = data / "cluster-metadata.json"
    stored = json.loads(path.read_text())
    assert "format_version" not in stored  # the earlier version's file: read as format 1
    cluster = _read_meta(data)["cluster.id"]
    EmbeddedBackend(data, cluster)._read(0)
    stored["format_version"] = 2
    path.write_text(json.dumps(stored))
    with pytest.raises(MetadataStoreError, match="has format_version 2, which this Odradek does not read"):
        EmbeddedBackend(data, cluster)._read(0)
    assert json.loads(path.read_text())["format_version"] == 2


lines = st.lists(st.one_of(st.sampled_from(["0", "1", "2", "-1", "9", "", " ", "a 0 1", "t 0 5", "0 0", "x"]),
                           st.text(max_size=12)), max_size=6)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(lines.map("\n".join), st.binary(max_size=40)))
def test_malformed_checkpoints_get_a_clear_error(tmp_path: Path, content: str | bytes) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    if isinstance(content, str):
        path.write_text(content, errors="surrogateescape")
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    for read in (read_offsets, read_epochs):
        try:
            read(path)
        except StorageError as exc:
            assert str(path) in exc.message
    assert path.read_bytes() == before


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(
    st.lists(st.sampled_from(["version=0", "version=1", "version=", "broker.id=0", "broker.id=x", "cluster.id=c",
                              "cluster.id=", "#x", "=", ":", "node.id=1"]), max_size=5).map("\n".join),
    st.binary(max_size=40),
))
def test_malformed_meta_properties_get_a_clear_error(tmp_path: Path, content: str | bytes) -> None:
    path = tmp_path / "meta.properties"
    if isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    try:
        props = _read_meta(tmp_path)
    except ConfigError as exc:
        assert str(path) in str(exc)
    else:
        assert props.get("cluster.id") and props.get("version", "0") == "0"
    assert path.read_bytes() == before


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(
    st.binary(max_size=80),
    st.builds(lambda v, rest: struct.pack(">h", v) + rest, st.sampled_from([1, 2, 3, -1, 0x7FFF]), st.binary(max_size=80)),
))
def test_malformed_producer_snapshots_are_refused_or_rebuilt_never_a_crash(tmp_path: Path, content: bytes) -> None:
    from odradek.storage.producer_state import ProducerStateManager

    directory = tmp_path / "t-0"
    directory.mkdir(exist_ok=True)
    path = directory / "00000000000000000005.snapshot"
    path.write_bytes(content)
    producers = ProducerStateManager(directory)
    version = struct.unpack(">h", content[:2])[0] if len(content) >= 10 else None
    try:
        loaded = producers.load_snapshot(100)
    except UnknownFormatError as exc:
        assert version not in (None, 1, 2)
        assert str(path) in exc.message and "remove it to rebuild the producer state" in exc.message
        assert path.read_bytes() == content  # refused: kept as it is
    else:
        # a known version: loaded, or damaged (checksum, length) and removed for a rebuild from the log
        assert version in (None, 1, 2)
        assert loaded == 5 or (loaded == -1 and not path.exists())
