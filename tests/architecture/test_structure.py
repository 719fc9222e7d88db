"""Structural rules the import contracts cannot state: the controller's, the groups' and the
transactions' state machines are written only through their transition tables, the broker has no
ZooKeeper-mode branches, and the sans-I/O layers never configure logging."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import odradek
from odradek.cluster.controller import (
    ControllerContext,
    IllegalTransition,
    PartitionStateName,
    ReplicaStateName,
)
from odradek.cluster.group import Group, GroupCoordinatorState, GroupLimits, GroupState
from odradek.cluster.transactions import TxnState
from tests.source_trees import parse

SRC = Path(odradek.__file__).parent
PS, RS = PartitionStateName, ReplicaStateName


def _modules(under: Path) -> list[Path]:
    files = sorted(under.rglob("*.py"))
    assert files, under
    return files


def test_the_state_machines_are_written_only_through_the_context_methods() -> None:
    """Every access to the state dicts is inside ControllerContext (whose writes check the tables)."""
    outside: list[str] = []
    inside = 0
    for path in _modules(SRC):
        tree = parse(path.read_text(), str(path))
        owners: dict[int, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for child in ast.walk(node):
                    owners.setdefault(id(child), node.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("_partition_states", "_replica_states",
                                                                   "partition_states", "replica_states"):
                in_context = path.name == "controller.py" and path.parent.name == "cluster" \
                    and owners.get(id(node)) == "ControllerContext"
                if in_context:
                    inside += 1
                elif node.attr.startswith("_"):
                    outside.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert inside >= 4  # the scan sees the context's own accesses (a broken scan would pass vacuously)
    assert not outside, f"controller state written around the transition tables at {outside}"
    assert not hasattr(ControllerContext(), "partition_states")
    assert not hasattr(ControllerContext(), "replica_states")


def test_the_context_methods_refuse_an_illegal_step() -> None:
    ctx = ControllerContext()
    tp = ("t", 0)
    try:
        ctx.set_partition_state(tp, PS.ONLINE)  # NonExistent -> Online skips New
    except IllegalTransition:
        pass
    else:
        raise AssertionError("an illegal partition transition was taken")
    assert ctx.partition_state(tp) is PS.NON_EXISTENT
    ctx.new_partition(tp)
    ctx.partition_led(tp, 1)
    assert ctx.partition_state(tp) is PS.ONLINE


# -- the coordinators' state machines: groups (cluster/group.py) and transactions (cluster/transactions.py)

_MACHINES = ("odradek.cluster.group", "odradek.cluster.consumer_group", "odradek.cluster.consumer_group_model",
             "odradek.cluster.transactions")
#: the only functions that write a group's or a transaction's state: the transitions (checked
#: against the tables) and the restoring of a state read back from the log
_STATE_WRITERS = {
    "cluster/group.py": {"_transition", "load_group"},
    # a consumer group's state follows from its epochs: set by _transition after each operation,
    # restored when loaded; a member's state changes in its reconciliation (checked against
    # MEMBER_TRANSITIONS) and is restored from its records
    "cluster/consumer_group.py": {"_transition", "loaded"},
    "cluster/transactions.py": {"begin_transition", "end_transition"},
}
_STATE_ATTRS = {"state", "_state", "pending"}
#: calls that could make a group or a transaction with a state of the caller's choosing
_BUILDERS = {"copy", "replace", "TxnMetadata", "Group"}


def _deals_with_the_machines(rel: str, tree: ast.Module) -> bool:
    """Modules that hold groups or transactions: the state machines' own, the coordinators, the
    handlers, and every module importing the machines (another object's ``.state`` elsewhere,
    a partition's or the client's transaction manager's, is not theirs)."""
    if rel in _STATE_WRITERS or rel.startswith(("broker/coordinator", "broker/handlers/")):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in _MACHINES:
            return True
        if isinstance(node, ast.Import) and any(a.name in _MACHINES for a in node.names):
            return True
    return False


def _state_writes(path: Path) -> tuple[list[str], int]:
    """(writes of a group's or transaction's state outside the transition functions, writes inside)."""
    rel = path.relative_to(SRC).as_posix()
    tree = parse(path.read_text(), str(path))
    if not _deals_with_the_machines(rel, tree):
        return [], 0
    machine_module = rel in _STATE_WRITERS
    allowed = _STATE_WRITERS.get(rel, set())
    function: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for child in ast.walk(node):
                function[id(child)] = node.name  # the innermost function wins (walked last)
    outside: list[str] = []
    inside = 0

    def write(node: ast.AST, what: str) -> None:
        nonlocal inside
        if function.get(id(node)) in allowed:
            inside += 1
        else:
            outside.append(f"{rel}:{getattr(node, 'lineno', '?')} {what}")

    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and t.attr in _STATE_ATTRS:
                    own = isinstance(t.value, ast.Name) and t.value.id == "self" and not machine_module
                    if not own:  # a coordinator's or the exporter's own attribute named so is not a state
                        write(t, f"assigns .{t.attr}")
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name == "setattr" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                    and node.args[1].value in _STATE_ATTRS:
                write(node, f"setattr(..., {node.args[1].value!r})")
            elif name in _BUILDERS and not machine_module and (
                any(k.arg in _STATE_ATTRS for k in node.keywords) or (name == "TxnMetadata" and len(node.args) > 4)
            ):
                outside.append(f"{rel}:{node.lineno} {name}(...) with a state")
    return outside, inside


def test_group_and_transaction_states_change_only_through_their_transition_tables() -> None:
    """As the controller's: a group's state is written only by GroupCoordinatorState._transition
    (and restored by load_group), a transaction's only by begin/end_transition; the states a
    transition moves to are made in cluster/transactions.py, never by the broker's code."""
    outside: list[str] = []
    inside = 0
    for path in _modules(SRC):
        found, count = _state_writes(path)
        outside += found
        inside += count
    assert not outside, f"group or transaction state written around the transition tables at {outside}"
    assert inside >= 4  # the scan sees the transition functions' own writes


def test_a_group_state_is_not_assignable() -> None:
    g = Group("g")
    with pytest.raises(AttributeError):
        g.state = GroupState.STABLE  # type: ignore[misc]
    assert g.state is GroupState.EMPTY


def test_an_illegal_group_step_raises_the_controllers_illegal_transition() -> None:
    state = GroupCoordinatorState(GroupLimits())
    g = state.groups["g"] = Group("g")
    with pytest.raises(IllegalTransition):
        state._transition(g, GroupState.STABLE, 5)  # Empty -> Stable skips the rebalance
    assert g.state is GroupState.EMPTY and g.state_timestamp == -1 and state.completed_rebalances == 0
    state._transition(g, GroupState.PREPARING_REBALANCE, 6)
    assert g.state is GroupState.PREPARING_REBALANCE


def test_an_illegal_transaction_step_raises_and_leaves_nothing_pending() -> None:
    from odradek.cluster.transactions import begin_transition, completed, end_transition, new_transactional_id

    meta = new_transactional_id("t", 1, 60_000, 0)
    with pytest.raises(IllegalTransition):
        begin_transition(meta, completed(meta, 1))  # Empty -> CompleteAbort: no transaction to complete
    assert meta.pending is None and meta.state is TxnState.EMPTY
    target = meta.copy(state=TxnState.ONGOING, partitions={("t", 0)})
    begin_transition(meta, target)
    assert meta.pending is TxnState.ONGOING
    end_transition(meta, target)
    assert meta.pending is None and target.pending is None


def test_the_tables_name_every_state() -> None:
    from odradek.cluster.group import GROUP_TRANSITIONS
    from odradek.cluster.transactions import TXN_TRANSITIONS

    for table, states in ((GROUP_TRANSITIONS, GroupState), (TXN_TRANSITIONS, TxnState)):
        for target in states:
            assert table.previous(target) <= set(states), target
    # a few of Kafka's edges, and their absence the other way
    assert GROUP_TRANSITIONS.allows(GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
    assert not GROUP_TRANSITIONS.allows(GroupState.STABLE, GroupState.EMPTY)
    assert TXN_TRANSITIONS.allows(TxnState.PREPARE_EPOCH_FENCE, TxnState.PREPARE_ABORT)
    assert not TXN_TRANSITIONS.allows(TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


def test_no_zookeeper_mode_branch_or_downcast_in_the_broker() -> None:
    found = []
    for path in _modules(SRC / "broker"):
        text = path.read_text()
        tree = parse(text, str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("zk_mode", "_zk", "single_node"):
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} if len(node.args) > 1 else set()
                if names & {"ZooKeeperBackend", "EmbeddedBackend", "ClusterReplication", "LocalReplication"}:
                    found.append(f"{path.name}:{node.lineno} isinstance(..., {sorted(names)})")
    assert not found, found


def test_the_sans_io_layers_do_not_configure_logging() -> None:
    """protocol, records, storage and cluster log through module loggers only: handlers, levels
    and formats are the application's (odradek serve, the CLI)."""
    configuring = {"basicConfig", "dictConfig", "fileConfig", "addHandler", "setLevel", "setFormatter"}
    found = []
    for layer in ("protocol", "records", "storage", "cluster"):
        for path in _modules(SRC / layer):
            tree = parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr in configuring:
                    found.append(f"{layer}/{path.name}:{node.lineno} .{node.attr}")
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                    if any(m.startswith("logging.") for m in mods):
                        found.append(f"{layer}/{path.name}:{node.lineno} imports {mods}")
    assert not found, found


def test_every_broker_config_the_code_reads_by_name_exists() -> None:
    """``BrokerConfig.get`` takes names as strings: a misspelt literal would only fail when its
    line runs.  Every literal name read from a broker config anywhere in the package is checked
    against the table here, so a typo fails the suite instead."""
    from odradek.client import ADMIN_DEFAULTS, CONSUMER_DEFAULTS, PRODUCER_DEFAULTS
    from odradek.config import BROKER_CONFIGS, BrokerConfig

    read: dict[str, str] = {}
    client_read: dict[str, str] = {}  # the clients read client configs (Kafka's client names)
    for path in _modules(SRC):
        tree = parse(path.read_text(), str(path))
        into = client_read if path.relative_to(SRC).parts[0] == "client" else read
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("get", "is_set", "source", "topic_default") and node.args):
                continue
            target = ast.unparse(node.func.value)
            if not (target.endswith("config") or target in ("cfg", "c.config")):
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                into[arg.value] = f"{path.relative_to(SRC)}:{node.lineno}"
    # the broker's components read typed settings (test_no_component_reads_a_setting_by_name): any
    # literal name still read (tests of this scan, a module on SETTINGS_BY_NAME_ALLOWED) must exist
    topic_level = {"retention.ms", "segment.bytes"}  # topic_default() takes topic config names
    unknown = {n: where for n, where in read.items() if n not in BROKER_CONFIGS and n not in topic_level}
    assert not unknown, f"config names that do not exist: {unknown}"
    client_names = {*PRODUCER_DEFAULTS, *CONSUMER_DEFAULTS, *ADMIN_DEFAULTS}
    assert len(client_read) >= 10, sorted(client_read)
    unknown = {n: where for n, where in client_read.items() if n not in client_names}
    assert not unknown, f"client config names that do not exist: {unknown}"
    # and a name that does not exist is refused when read (not silently None)
    try:
        BrokerConfig({}).get("log.retention.hour")
    except Exception as exc:
        assert "log.retention.hours" in str(exc)
    else:
        raise AssertionError("reading an unknown broker config name returned a value")


#: modules still reading broker settings by name, each with why (to leave this list once typed)
SETTINGS_BY_NAME_ALLOWED: dict[str, str] = {}
#: where Kafka's *client* configs are read by name (the client tables, not the broker's settings)
_CLIENT_SIDE = ("client", "spark")
_BY_NAME = ("get", "for_listener", "is_set", "source", "static_value", "topic_default", "set_dynamic")


def _holds_config(expr: ast.expr) -> bool:
    return ast.unparse(expr).lower().endswith(("config", "cfg", "conf", "settings", "store", "current"))


def _settings_read_by_name(path: Path, names: set[str]) -> list[str]:
    """Reads of a broker setting by a literal name in ``path``: ``x.get("log.dir")``,
    ``x.for_listener(l, "ssl.client.auth")``, a ``get("...")`` helper, ``config["log.dir"]``."""
    found = []
    for node in ast.walk(parse(path.read_text(), str(path))):
        literal: list[ast.expr] = []
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "get":  # a get = config.get helper
                literal = list(node.args[:1])
            # .get of anything that holds configuration (a dict of a request's changes is not)
            elif isinstance(func, ast.Attribute) and func.attr in _BY_NAME and (
                func.attr != "get" or _holds_config(func.value)
            ):
                literal = list(node.args[:2])
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _holds_config(node.value):
            literal = [node.slice]
        for arg in literal:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value in names:
                found.append(f"{path.relative_to(SRC)}:{node.lineno} {arg.value}")
    return found


def test_no_component_reads_a_broker_setting_by_name() -> None:
    """Components read the typed settings (odradek.settings: ``settings.log.retention_ms``), never
    ``config.get("log.retention.ms")``: only the config module and the settings built from it
    name settings by string (and the modules listed above, until their rework lands)."""
    from odradek.config import BROKER_CONFIGS

    names = set(BROKER_CONFIGS)
    found: list[str] = []
    allowed_found: dict[str, int] = dict.fromkeys(SETTINGS_BY_NAME_ALLOWED, 0)
    for path in _modules(SRC):
        rel = path.relative_to(SRC).as_posix()
        if rel == "config.py" or rel.startswith("settings/") or rel.split("/")[0] in _CLIENT_SIDE:
            continue
        reads = _settings_read_by_name(path, names)
        if rel in SETTINGS_BY_NAME_ALLOWED:
            allowed_found[rel] += len(reads)
        else:
            found += reads
    assert not found, "settings read by name (use the typed settings of odradek.settings):\n" + "\n".join(found)
    # the scan sees the reads it allows (a broken scan would pass vacuously), and a module that
    # reads no setting by name any more leaves the list
    stale = [rel for rel, n in allowed_found.items() if n == 0]
    assert not stale, f"no longer read settings by name, remove them from SETTINGS_BY_NAME_ALLOWED: {stale}"


#: the ports each handler module may use (ctx.ports.<area>); the authorizer is the request's
HANDLER_PORTS = {
    "acls": {"acls"}, "admin": {"admin"}, "api_versions": {"features"}, "cluster": {"cluster"}, "configs": {"configs"},
    "features": {"features"}, "topic_partitions": {"metadata"},
    "consumer_groups": {"groups"}, "share_groups": {"groups"}, "share_fetch": {"share"}, "share_state": {"share_state"},
    "fetch": {"fetch"}, "groups": {"groups"}, "list_offsets": {"list_offsets"}, "metadata": {"metadata"},
    "produce": {"produce"}, "quotas": {"quotas"}, "sasl": {"sasl"}, "telemetry": {"telemetry"},
    "transactions": {"transactions"},
}


def test_each_handler_module_uses_only_its_own_port() -> None:
    used: dict[str, set[str]] = {}
    for path in _modules(SRC / "broker" / "handlers"):
        if path.name == "__init__.py":
            continue
        mine = used.setdefault(path.stem, set())
        for node in ast.walk(parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "ports":
                mine.add(node.attr)
            assert not (isinstance(node, ast.Attribute) and node.attr == "services"), f"{path.name}:{node.lineno}"
    assert set(used) == set(HANDLER_PORTS), sorted(used)
    wrong = {m: sorted(areas - HANDLER_PORTS[m] - {"authorizer"}) for m, areas in used.items()}
    assert not any(wrong.values()), f"handlers using another area's port: {wrong}"
    assert sum(len(a) for a in used.values()) >= 12  # the scan sees the ports
