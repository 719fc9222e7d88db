"""The event loop's decompression budget (``max_decompressed``) changes where a batch is checked,
never what the check says: with any budget, the validation of any batch — honest or lying, of
any codec, of records that inflate far or not at all — gives exactly the answer it gives with
Kafka's bound, except DecompressionBudgetExceeded, which it raises only for a compressed batch
whose records are larger than the budget, and then with nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek._clock import FakeClock
from odradek.errors import OdradekError
from odradek.records import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, decompress
from odradek.storage import DecompressionBudgetExceeded, Log, LogConfig, validator

from ..records import lying

CONFIG = LogConfig.from_dict({})
# what a record can carry: a little, or a run of zeros that compresses ~1000x
values = st.none() | st.binary(max_size=40) | st.integers(1, 300_000).map(lambda n: bytes(n))
honest = st.builds(
    lambda recs, codec: ("honest", lying.batch(recs, codec=codec)),
    st.lists(st.builds(lying.Rec, tsd=st.integers(0, 5000), key=lying.keys, value=values), min_size=1, max_size=6),
    lying.codecs,
)
batches = honest | lying.lies()
budgets = st.integers(0, 64 * 1024) | st.sampled_from([1, 61, 4 * 1024 * 1024])


def _outcome(data: bytes, budget: int) -> tuple[object, ...]:
    try:
        headers = validator.validate_batches(data, CONFIG, "t", 0, now_ms=lying.TS0, max_decompressed=budget)
    except DecompressionBudgetExceeded:
        return ("budget",)
    except OdradekError as exc:
        return (type(exc).__name__, getattr(exc, "code", None), str(exc))
    return ("ok", tuple(headers))


def _inflated(data: bytes) -> int:
    """The size of a compressed batch's records (0: not compressed, or not decompressible)."""
    codec = data[22] & 0x07  # the low byte of the attributes
    if not codec:
        return 0
    try:
        return len(decompress(codec, data[61:], max_size=DEFAULT_MAX_DECOMPRESSED_SIZE))
    except Exception:
        return 0


@given(drawn=batches, budget=budgets)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_budget_changes_no_answer_only_where_it_is_given(check_pass: str, drawn: tuple[str, bytes], budget: int) -> None:
    kind, data = drawn
    full = _outcome(data, DEFAULT_MAX_DECOMPRESSED_SIZE)
    budgeted = _outcome(data, budget)
    assert full != ("budget",)
    if budgeted == ("budget",):
        assert _inflated(data) > budget, (kind, budget, _inflated(data))
    elif _inflated(data) > budget:
        # an error found before the records were decompressed (the header's) is the same answer
        assert budgeted == full and full[0] != "ok", (kind, budget, full)
    else:
        assert budgeted == full, (kind, budget)


@pytest.fixture(scope="module")
def shared_log(tmp_path_factory: pytest.TempPathFactory) -> Log:
    path: Path = tmp_path_factory.mktemp("budget") / "t-0"
    return Log(path, LogConfig.from_dict({}), clock=FakeClock(lying.TS0), clean_shutdown=True)


@given(drawn=batches, budget=budgets)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_an_append_over_its_budget_writes_nothing(shared_log: Log, drawn: tuple[str, bytes], budget: int) -> None:
    _kind, data = drawn
    full = _outcome(data, DEFAULT_MAX_DECOMPRESSED_SIZE)
    end, size = shared_log.log_end_offset, shared_log.active.size
    try:
        shared_log.append(data, max_decompressed=budget)
    except DecompressionBudgetExceeded:
        assert _inflated(data) > budget
        assert (shared_log.log_end_offset, shared_log.active.size) == (end, size)
        return
    except OdradekError:
        assert full[0] != "ok"
        assert (shared_log.log_end_offset, shared_log.active.size) == (end, size)
        return
    assert full[0] == "ok"
    assert shared_log.log_end_offset > end


def test_the_strategies_reach_both_sides_of_the_budget() -> None:
    """The inflating records are there: a run of zeros well over a budget, compressed to a few bytes."""
    data = lying.batch([lying.Rec(tsd=0, key=None, value=bytes(200_000))], codec=Compression.ZSTD)
    assert len(data) < 2_000 and _inflated(data) > 64 * 1024
    assert _outcome(data, 64 * 1024) == ("budget",) and _outcome(data, DEFAULT_MAX_DECOMPRESSED_SIZE)[0] == "ok"
