"""The share coordinator's pure rules (odradek.cluster.share_state): merging state batches, the
snapshot + delta records, their replay, and fencing."""

from __future__ import annotations

import itertools
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.cluster.share_state import (
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    ShareKey,
    ShareRecord,
    ShareStateMap,
    StateBatch,
    coordinator_key,
    decode_record,
    encode_record,
    merge_batches,
    parse_coordinator_key,
)
from odradek.errors import ErrorCode, KafkaError

KEY = ShareKey("g", uuid.UUID(int=7), 3)
STATES = st.sampled_from([0, 1, 2, 4])


@st.composite
def batches(draw: st.DrawFn, max_size: int = 6) -> list[StateBatch]:
    out = []
    for _ in range(draw(st.integers(0, max_size))):
        first = draw(st.integers(0, 60))
        last = first + draw(st.integers(0, 15))
        out.append(StateBatch(first, last, draw(st.integers(0, 4)), draw(STATES)))
    return out


def _per_offset(bs: list[StateBatch], start: int) -> dict[int, tuple[int, int]]:
    """The reference: each offset's delivery, the highest (count, state) covering it."""
    out: dict[int, tuple[int, int]] = {}
    for b in bs:
        for o in range(max(b.first_offset, start if start != -1 else 0), b.last_offset + 1):
            out[o] = max(out.get(o, (-1, -1)), (b.delivery_count, b.state))
    return out


def _expand(bs: tuple[StateBatch, ...]) -> dict[int, tuple[int, int]]:
    return {o: (b.delivery_count, b.state) for b in bs for o in range(b.first_offset, b.last_offset + 1)}


@given(batches(), batches(), st.integers(-1, 70))
def test_merge_is_the_highest_delivery_per_offset_canonical(cur: list[StateBatch], new: list[StateBatch], start: int) -> None:
    merged = merge_batches(cur, new, start)
    assert _expand(merged) == _per_offset(cur + new, start)
    for a, b in itertools.pairwise(merged):
        assert a.last_offset < b.first_offset  # sorted, disjoint
        if a.last_offset + 1 == b.first_offset:  # maximal: neighbours differ
            assert (a.delivery_count, a.state) != (b.delivery_count, b.state)
    if start != -1:
        assert all(b.first_offset >= start for b in merged)


def test_merge_examples() -> None:
    # a later acknowledgement (higher count) overwrites the middle of an available batch
    assert merge_batches([StateBatch(0, 9, 1, 0)], [StateBatch(3, 5, 2, 2)], 0) == (
        StateBatch(0, 2, 1, 0), StateBatch(3, 5, 2, 2), StateBatch(6, 9, 1, 0),
    )
    # batches below the start offset go, one straddling it is cut; adjacent equal ones join
    assert merge_batches([StateBatch(0, 4, 1, 2), StateBatch(5, 9, 1, 2)], [StateBatch(10, 12, 1, 2)], 3) == (
        StateBatch(3, 12, 1, 2),
    )
    assert merge_batches([StateBatch(0, 4, 1, 2)], [], 5) == ()


@st.composite
def requests(draw: st.DrawFn) -> list[tuple[str, dict[str, object]]]:
    out: list[tuple[str, dict[str, object]]] = []
    leader, state = 0, 0
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["write", "write", "write", "write", "init", "read", "delete"]))
        leader += draw(st.sampled_from([0, 0, 0, 1, -1]))
        state += draw(st.sampled_from([0, 0, 0, 0, 1, -1]))
        if kind == "write":
            out.append((kind, {"leader_epoch": leader, "state_epoch": state,
                               "start_offset": draw(st.integers(-1, 40)), "batches": draw(batches(4))}))
        elif kind == "init":
            out.append((kind, {"state_epoch": state, "start_offset": draw(st.integers(0, 40))}))
        elif kind == "read":
            out.append((kind, {"leader_epoch": leader}))
        else:
            out.append((kind, {}))
    return out


def _run(m: ShareStateMap, reqs: list[tuple[str, dict[str, object]]]) -> list[ShareRecord]:
    """Plan each request, write (replay) its records; the records written, in order."""
    written: list[ShareRecord] = []
    for i, (kind, args) in enumerate(reqs):
        try:
            if kind == "write":
                recs = [m.plan_write(KEY, now_ms=i, **args)]  # type: ignore[arg-type]
            elif kind == "init":
                recs = [m.plan_initialize(KEY, now_ms=i, **args)]  # type: ignore[arg-type]
            elif kind == "read":
                _state, rec = m.read(KEY, now_ms=i, **args)  # type: ignore[arg-type]
                recs = [rec] if rec is not None else []
            else:
                recs = m.plan_delete(KEY)
        except KafkaError as exc:
            assert exc.code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH)
            continue
        for r in recs:
            m.replay(r)
            written.append(r)
    return written


@given(requests(), st.integers(1, 4))
def test_replaying_the_written_records_gives_the_same_state(reqs: list[tuple[str, dict[str, object]]], every: int) -> None:
    live = ShareStateMap(snapshot_every=every)
    written = _run(live, reqs)
    again = ShareStateMap(snapshot_every=every)
    for r in written:
        again.replay(decode_record(*encode_record(r)))  # type: ignore[arg-type]
    assert again.states == live.states
    assert again.leader_epochs == live.leader_epochs
    assert again.state_epochs == live.state_epochs
    # a snapshot at least every `every` updates: no key carries more deltas than that
    assert all(n <= every for n in again.updates.values())
    run = 0
    for r in written:
        if r.kind == UPDATE_TYPE and r.state is not None:
            run += 1
            assert run <= every
        else:
            run = 0
    for s in live.states.values():  # nothing below the start offset is kept
        assert all(b.first_offset >= s.start_offset for b in s.batches)


def test_snapshot_every_n_updates() -> None:
    m = ShareStateMap(snapshot_every=3)
    kinds = []
    for i in range(9):
        rec = m.plan_write(KEY, leader_epoch=0, state_epoch=0, start_offset=0,
                           batches=[StateBatch(i, i, 1, 2)], now_ms=i)
        m.replay(rec)
        kinds.append(rec.kind)
    S, U = SNAPSHOT_TYPE, UPDATE_TYPE
    assert kinds == [S, U, U, U, S, U, U, U, S]
    state = m.states[KEY]
    assert state.batches == (StateBatch(0, 8, 1, 2),)
    assert state.snapshot_epoch == 2


def test_fencing() -> None:
    m = ShareStateMap()
    m.replay(m.plan_write(KEY, leader_epoch=5, state_epoch=2, start_offset=0, batches=[], now_ms=0))
    with pytest.raises(KafkaError) as e:
        m.plan_write(KEY, leader_epoch=4, state_epoch=2, start_offset=0, batches=[], now_ms=0)
    assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH
    with pytest.raises(KafkaError) as e:
        m.plan_write(KEY, leader_epoch=5, state_epoch=1, start_offset=0, batches=[], now_ms=0)
    assert e.value.code == ErrorCode.FENCED_STATE_EPOCH
    with pytest.raises(KafkaError) as e:
        m.read(KEY, 4, 0)
    assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH
    # a newer leader's read records its epoch: the old leader is fenced from then on
    _state, rec = m.read(KEY, 6, 0)
    assert rec is not None
    m.replay(rec)
    with pytest.raises(KafkaError) as e:
        m.plan_write(KEY, leader_epoch=5, state_epoch=2, start_offset=0, batches=[], now_ms=0)
    assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH
    # initializing with an older state epoch is fenced; a newer one resets the state
    with pytest.raises(KafkaError) as e:
        m.plan_initialize(KEY, state_epoch=1, start_offset=10, now_ms=0)
    assert e.value.code == ErrorCode.FENCED_STATE_EPOCH
    m.replay(m.plan_initialize(KEY, state_epoch=3, start_offset=10, now_ms=0))
    assert m.states[KEY].start_offset == 10 and m.states[KEY].batches == ()
    # deleting forgets the key and its epochs
    for r in m.plan_delete(KEY):
        m.replay(r)
    assert KEY not in m.states and KEY not in m.leader_epochs
    assert m.read(KEY, 0, 0) == (None, None)


@pytest.mark.parametrize("batch", [
    StateBatch(-1, 3, 1, 0), StateBatch(5, 4, 1, 0), StateBatch(0, 3, -1, 0), StateBatch(0, 3, 1, 3),
    StateBatch(0, 3, 1, 9),
])
def test_malformed_batches_are_invalid_requests(batch: StateBatch) -> None:
    m = ShareStateMap()
    with pytest.raises(KafkaError) as e:
        m.plan_write(KEY, leader_epoch=0, state_epoch=0, start_offset=0, batches=[batch], now_ms=0)
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert m.states == {}


def test_coordinator_key_round_trip() -> None:
    tid = uuid.UUID("5e0f5d2a-31f3-4b4e-9a47-4d3c8c3c9d10")
    key = coordinator_key("my:group", tid, 12)
    assert key.endswith(":12") and key.count(":") == 3
    assert parse_coordinator_key(key) == ShareKey("my:group", tid, 12)
    for bad in ["", "g", "g:x:1", "g:AAAAAAAAAAAAAAAAAAAAAA:-1", ":AAAAAAAAAAAAAAAAAAAAAA:1", "g:AAAAAAAAAAAAAAAAAAAAAA:x"]:
        with pytest.raises(KafkaError) as e:
            parse_coordinator_key(bad)
        assert e.value.code == ErrorCode.INVALID_REQUEST
