"""``odradek dump-log`` reads every record: ``--verify`` finds every batch whose records lie under a
valid CRC and every stretch of offsets no segment holds; ``--print-data-log`` prints what it can
of any file and never stops on bad bytes."""

from __future__ import annotations

import io
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.cli.dump_log import dump_paths, verify_paths
from odradek.records import BatchBuilder, crc32c, iter_batch_headers, patch_base_offset
from odradek.storage import LogManager

from ..records import lying

TS0 = lying.TS0


def _good(n: int, tag: str = "v", codec: int = 0) -> bytes:
    b = BatchBuilder(compression=codec)
    for i in range(n):
        b.append(TS0 + i, f"k{i}".encode(), f"{tag}-{i}".encode(), [("h", b"x")])
    return b.build()


def _partition(root: Path, lie: bytes, **config: object) -> tuple[Path, int, int]:
    """A partition with 3 good batches, ``lie`` (written as a follower writes, which does not read
    records) and 2 good batches; returns (its directory, the lie's position and base offset)."""
    manager = LogManager([root], {"segment.bytes": 1 << 20, **config})
    log = manager.get_or_create("t", 0)
    for i in range(3):
        log.append(_good(2, f"a{i}"))
    position, base = log.active.size, log.log_end_offset
    stored = bytearray(lie)
    patch_base_offset(stored, 0, base)
    log.append_as_follower(bytes(stored))
    for i in range(2):
        nxt = bytearray(_good(2, f"b{i}"))
        patch_base_offset(nxt, 0, log.log_end_offset)
        log.append_as_follower(bytes(nxt))
    manager.shutdown()
    return root / "t-0", position, base


def _verify(*paths: Path) -> tuple[int, str]:
    out = io.StringIO()
    return verify_paths([str(p) for p in paths], out=out), out.getvalue()


def _dump(path: Path, **kw: object) -> tuple[int, str]:
    out = io.StringIO()
    status = dump_paths([str(path)], print_data=True, deep=True, max_bytes=None, out=out, **kw)  # type: ignore[arg-type]
    return status, out.getvalue()


def _segment_with(root: Path, lie: bytes) -> tuple[Path, int, int, int]:
    """A segment file of two good batches, ``lie`` and a good batch (offsets as a log gives them);
    returns (its path, the lie's position and base offset, the last offset)."""
    part = root / "t-0"
    part.mkdir()
    first = _stored(_good(2, "a"), 0) + _stored(_good(2, "b"), 2)
    after = 4 + next(iter(iter_batch_headers(lie))).last_offset_delta + 1
    seg = part / "00000000000000000000.log"
    seg.write_bytes(first + _stored(lie, 4) + _stored(_good(2, "c"), after))
    return seg, len(first), 4, after + 1


def _stored(batch: bytes, base: int) -> bytes:
    buf = bytearray(batch)
    patch_base_offset(buf, 0, base)
    return bytes(buf)


@pytest.mark.parametrize("lie_kind", lying.KINDS)
@given(drawn=st.data())
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
def test_verify_finds_every_lying_batch(tmp_path_factory: pytest.TempPathFactory, lie_kind: str, drawn: st.DataObject) -> None:
    kind, lie = drawn.draw(lying.lies(kinds=(lie_kind,)))
    seg, position, base, last = _segment_with(tmp_path_factory.mktemp("lie"), lie)
    status, out = _verify(seg.parent)
    assert status == 1, (kind, out)
    assert f"{seg}: position {position} offset {base} (after offset {base - 1}): records do not match" in out, out
    assert "1 problem(s) found in 1 segment(s) (4 entries)" in out, out  # the batch after it checked too
    status, printed = _dump(seg)
    assert status == 1, (kind, printed)
    assert "could not all be read" in printed or f"Invalid entry at position {position}" in printed
    assert f"| offset: {last} CreateTime" in printed  # the last batch is printed


def test_a_follower_written_lie_is_found_in_a_real_log(tmp_path: Path) -> None:
    """A log written by the storage layer (the lie taken as a follower takes batches, without
    reading records: as an older broker would have stored it)."""
    part, position, base = _partition(tmp_path, lying.batch([lying.Rec(0, b"k", b"v"), lying.Rec(1, b"k", b"v")], count=3))
    status, out = _verify(part)
    assert status == 1
    assert f"position {position} offset {base} (after offset {base - 1}): records do not match the batch header: " \
           "Incorrect declared batch size, premature EOF reached: the batch declares 3 records and holds 2" in out, out


def test_print_data_log_prints_the_records_before_the_bad_one(tmp_path: Path) -> None:
    recs = [lying.Rec(0, b"a", b"first"), lying.Rec(1, b"b", b"second"), lying.Rec(2, b"c", b"third", od=1)]
    part, position, base = _partition(tmp_path, lying.batch(recs))
    status, out = _dump(part / "00000000000000000000.log")
    assert status == 1
    assert f"| offset: {base} CreateTime: {TS0} keySize: 1 valueSize: 5 headerKeys: [] key: a payload: first" in out
    assert f"| offset: {base + 1} CreateTime: {TS0 + 1}" in out and "payload: third" not in out
    assert (f"| the records of the batch at position {position} (offset {base}) could not all be read: "
            "Invalid offset delta 1 of record 2 of 3, after 1") in out
    # the same from the command line: exit status 1, no traceback
    result = subprocess.run([sys.executable, "-m", "odradek", "dump-log", "--print-data-log", str(part)],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "could not all be read" in result.stdout


@given(st.data())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_print_data_log_never_stops_on_bad_bytes(data: st.DataObject) -> None:
    import tempfile

    content = bytearray(b"".join(_good(3, str(i), codec=i % 5) for i in range(4)))
    spans = [(h.position, h.end) for h in iter_batch_headers(bytes(content))]
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(content) - 1))
        content[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):  # the CRCs made right again: only the records are wrong
        for start, end in spans:
            struct.pack_into(">I", content, start + 17, crc32c(bytes(content[start + 21 : end])))
    cut = data.draw(st.integers(0, 40))
    with tempfile.TemporaryDirectory() as tmp:
        seg = Path(tmp) / "00000000000000000000.log"
        seg.write_bytes(bytes(content[: len(content) - cut]))
        status, _out = _dump(seg)  # never raises
        assert status in (0, 1)
        status, _out = _verify(seg)
        assert status in (0, 1)


def _segments(root: Path, n: int) -> Path:
    manager = LogManager([root], {"segment.bytes": 400})
    log = manager.get_or_create("t", 0)
    for i in range(n):
        log.append(_good(3, f"x{i}"))
    manager.shutdown()
    return root / "t-0"


def test_verify_reports_offsets_in_no_segment(tmp_path: Path) -> None:
    part = _segments(tmp_path, 12)
    segs = sorted(part.glob("*.log"))
    assert len(segs) >= 4
    gone = segs[1]
    after = segs[2]
    gone.unlink()
    status, out = _verify(part)
    assert status == 1, out
    assert f"{after}: offsets {int(gone.stem)} to {int(after.stem) - 1} are in no segment (between {segs[0].name} " \
           f"and {after.name}: a segment file deleted?)" in out
    # the last segment deleted: the log ends before the offset it was flushed up to
    last = sorted(part.glob("*.log"))[-1]
    last.unlink()
    status, out = _verify(part)
    assert status == 1
    assert ("the log was flushed up to offset 36 (recovery-point-offset-checkpoint), but the last segment "
            f"{sorted(part.glob('*.log'))[-1].name} ends at offset {int(last.stem)}") in out, out


def test_compaction_gaps_are_not_damage(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], {"segment.bytes": 300, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})
    log = manager.get_or_create("c", 0)
    for i in range(30):
        b = BatchBuilder()
        b.append(TS0 + i, b"k%d" % i if i % 5 == 1 else b"same", b"v%d" % i)
        log.append(b.build())
    manager.clean(TS0 + 10**9)
    manager.shutdown()
    status, out = _verify(tmp_path / "c-0")
    assert status == 0, out
    # the cleaner checkpoint is what tells them apart from damage
    (tmp_path / "cleaner-offset-checkpoint").unlink()
    status, out = _verify(tmp_path / "c-0")
    assert status == 1 and "are in no segment" in out


@pytest.mark.parametrize("name", ["foo.log", "12.index"])
def test_print_reports_files_that_are_not_segments(tmp_path: Path, name: str) -> None:
    f = tmp_path / name
    f.write_bytes(b"\x00" * 30)
    status, out = _dump(f)
    assert status in (0, 1) and "Traceback" not in out
