"""``odradek cluster``: run a local ZooKeeper-coordinated cluster for development and tests.

::

    odradek cluster up --brokers 3            # ZooKeeper on 2181, brokers 1..3 on 9092..9094
    odradek cluster status                    # brokers, controller, leader/replicas/ISR per partition
    odradek cluster restart-broker 2          # controlled shutdown of broker 2, then start it again
    odradek cluster rolling-restart           # each broker in turn, waiting for full ISRs in between
    odradek cluster stop-broker 2 / start-broker 2 / kill-broker 2 (SIGKILL: a crash)
    odradek cluster down                      # controlled shutdown of each broker, then ZooKeeper

Everything lives in ``--dir`` (default ``./odradek-cluster``): ``zookeeper/`` (the ZooKeeper
instance), ``broker-N/`` (each broker's log.dirs), ``broker-N.log`` (its output) and
``cluster.json`` (ZooKeeper's address and how each broker is started: id, port, data dir, log,
overrides). The processes run detached (in their own sessions), so they outlive the ``up`` command.

Which brokers run, and their PIDs, is read live from ZooKeeper: every broker registers its process
id in its ``/brokers/ids/<id>`` znode (an extra field), so a broker restarted by hand is seen and
stopped like the others.  PIDs recorded in ``cluster.json`` are used only for brokers that are not
registered (starting, or cut off from ZooKeeper), and only while ``/proc`` shows that PID still is
that broker.  A PID is signalled only when its command line is an ``odradek serve``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "live_brokers", "read_cluster_file", "read_status", "run"]

DEFAULT_DIR = "./odradek-cluster"
CLUSTER_FILE = "cluster.json"
_READY = re.compile(r"ready on PLAINTEXT://(?P<host>[^:\s]+):(?P<port>\d+)")
_HOST = "127.0.0.1"
_READY_SECURE = re.compile(r"SASL_SSL://(?P<host>[^:\s,]+):(?P<port>\d+)")


def _secure_setup(cluster_dir: Path, zookeeper: str) -> Path:
    """A throwaway CA and broker keystore, SCRAM users ``broker`` and ``admin`` written to
    ZooKeeper (random passwords), the admin's client settings in DIR/client-sasl-ssl.properties;
    returns the brokers' settings file (both mode 600: no password on a command line)."""
    import asyncio
    import secrets

    from odradek.cli.certs import make_ca, make_signed
    from odradek.coordination.zookeeper import zk_set_user_scram
    from odradek.security import ScramCredential

    tls = cluster_dir / "tls"
    tls.mkdir(parents=True, exist_ok=True)
    make_ca(tls, "ca", "/CN=Odradek dev cluster CA")
    key, cert = make_signed(tls, "broker", "/CN=localhost", "ca",
                            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    keystore = tls / "broker-keystore.pem"
    keystore.write_text(key.read_text() + cert.read_text())
    keystore.chmod(0o600)
    passwords = {user: secrets.token_urlsafe(18) for user in ("broker", "admin")}
    for user, password in passwords.items():
        cred = ScramCredential.from_password("SCRAM-SHA-512", password).to_text()
        asyncio.run(zk_set_user_scram(zookeeper, user, {"SCRAM-SHA-512": cred}))
    props = cluster_dir / "client-sasl-ssl.properties"
    props.write_text(
        "bootstrap.servers=\nsecurity.protocol=SASL_SSL\n"
        f"ssl.truststore.location={tls / 'ca.pem'}\nssl.ca.location={tls / 'ca.pem'}\n"
        "sasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\n"
        f"sasl.password={passwords['admin']}\n"
    )
    props.chmod(0o600)
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="broker" password="{passwords["broker"]}";'
    )
    settings = cluster_dir / "security.properties"
    settings.write_text("\n".join([
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name=SASL_SSL",
        f"ssl.keystore.location={keystore}",
        f"ssl.truststore.location={tls / 'ca.pem'}",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
        f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={jaas}",
        "",
    ]))
    settings.chmod(0o600)
    return settings


def add_parser(sub: Any) -> None:
    """Add the ``odradek cluster`` subcommand (start, inspect and stop a local ZooKeeper-coordinated cluster)
    and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser(
        "cluster",
        help="start, inspect and stop a local ZooKeeper-coordinated cluster",
        description="Run a local cluster: one ZooKeeper (Debian package `zookeeper`) and N brokers, "
        "as background processes whose PIDs, ports and logs are kept in --dir.",
    )
    csub = p.add_subparsers(dest="cluster_command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = csub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        c.add_argument("--dir", default=DEFAULT_DIR, help=f"the cluster directory (default {DEFAULT_DIR})")
        return c

    up = command("up", "start ZooKeeper and N brokers in the background")
    up.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3), with broker.id 1..N")
    up.add_argument(
        "--zookeeper-port", type=int, default=2181, help="ZooKeeper's client port (default 2181; 0: a free port)"
    )
    up.add_argument(
        "--base-port", type=int, default=9092, help="broker i listens on BASE+i-1 (default 9092; 0: free ports)"
    )
    up.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="a broker config for every broker"
    )
    up.add_argument("--log-level", default="INFO", help="the brokers' logging level (default INFO)")
    up.add_argument(
        "--security", choices=("plaintext", "sasl_ssl"), default="plaintext",
        help="sasl_ssl: every broker also gets a SASL_SSL listener (SCRAM-SHA-512, a throwaway CA), brokers "
        "talk to each other over it, and the client settings are written to DIR/client-sasl-ssl.properties",
    )
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each process (default 60)")

    st = command("status", "brokers, controller and partitions (leader, replicas, ISR), as ZooKeeper has them")
    st.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="ask this ZooKeeper (default: the cluster's)")
    st.add_argument("--output", choices=("table", "json"), default="table", help="table (default) or json")
    st.add_argument("--json", action="store_true", help="the same as --output json")
    st.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for ZooKeeper (default 10)")

    el = command("elect-leaders", "elect preferred (or, for leaderless partitions, unclean) leaders now")
    el.add_argument("--bootstrap-server", "-b", help="a broker (default: the cluster's, else 127.0.0.1:9092)")
    el.add_argument("--election-type", choices=("preferred", "unclean"), default="preferred")
    el.add_argument("--topic", help="only this topic (default: every partition)")
    el.add_argument("--partition", type=int, action="append", help="only these partitions of --topic")

    rr = command("rolling-restart", "restart every broker, one at a time, waiting for full ISRs between them")
    rr.add_argument("--timeout", type=float, default=60.0,
                    help="seconds to wait for a broker to stop (then SIGKILL) or to be ready (default 60)")
    rr.add_argument("--isr-timeout", type=float, default=300.0,
                    help="seconds to wait for every partition's ISR to be full again (default 300)")
    rr.add_argument("--no-elect-leaders", action="store_true",
                    help="skip the preferred-leader election at the end")
    rr.add_argument("--output", choices=("table", "json"), default="table",
                    help="json: a summary on stdout (per broker: stop, start and catch-up seconds)")

    wh = command("wait-healthy", "wait until every partition's ISR is full and none is offline (exit 1 on timeout)")
    wh.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="ask this ZooKeeper (default: the cluster's)")
    wh.add_argument("--timeout", type=float, default=300.0, help="seconds to wait (default 300)")
    wh.add_argument("--brokers", help="comma-separated broker ids that must be registered too")

    down = command("down", "stop every running broker (controlled shutdown, SIGTERM) and then ZooKeeper")
    down.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for each broker before SIGKILL (default 60)"
    )

    for name, what in (
        ("stop-broker", "stop broker N (controlled shutdown: SIGTERM, SIGKILL after --timeout)"),
        ("start-broker", "start broker N again (same port, data dir and settings as at `up`)"),
        ("restart-broker", "stop broker N (controlled shutdown) and start it again"),
        ("kill-broker", "kill broker N with SIGKILL (a crash: no controlled shutdown)"),
    ):
        c = command(name, what)
        c.add_argument("broker", type=int, metavar="N", help="the broker id")
        if name != "kill-broker":
            c.add_argument(
                "--timeout", type=float, default=60.0,
                help="seconds to wait for the broker to stop (then SIGKILL) or to be ready (default 60)",
            )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Run ``odradek cluster`` for the parsed ``args``; returns the exit status: 0, 1 with the
    error on stderr, 2 for an unknown cluster command."""
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # its reconnect chatter is not for the terminal
    cluster_dir = Path(args.dir).absolute()
    if args.cluster_command == "up":
        return cluster_up(
            cluster_dir,
            brokers=args.brokers,
            zookeeper_port=args.zookeeper_port,
            base_port=args.base_port,
            overrides=args.override,
            log_level=args.log_level,
            timeout=args.timeout,
            security=args.security,
        )
    if args.cluster_command == "status":
        as_json = args.json or args.output == "json"
        return cluster_status(cluster_dir, zookeeper=args.zookeeper, as_json=as_json, timeout=args.timeout)
    if args.cluster_command == "down":
        return cluster_down(cluster_dir, timeout=args.timeout)
    if args.cluster_command in ("rolling-restart", "wait-healthy"):
        from . import _rolling

        if args.cluster_command == "rolling-restart":
            return _rolling.rolling_restart(
                cluster_dir, timeout=args.timeout, isr_timeout=args.isr_timeout, elect=not args.no_elect_leaders,
                as_json=args.output == "json",
            )
        zookeeper = args.zookeeper
        if zookeeper is None:
            state = _require_state(cluster_dir)
            if state is None:
                return 1
            zookeeper = str(state.get("zookeeper", {}).get("connect", ""))
        try:
            brokers = {int(x) for x in args.brokers.split(",")} if args.brokers else None
        except ValueError:
            _err(f"--brokers: not a list of broker ids: {args.brokers}")
            return 2
        return _rolling.wait_healthy_command(zookeeper, timeout=args.timeout, brokers=brokers)
    if args.cluster_command == "elect-leaders":
        return elect_leaders(cluster_dir, args.bootstrap_server, args.election_type, args.topic, args.partition)
    if args.cluster_command == "stop-broker":
        return stop_broker(cluster_dir, args.broker, timeout=args.timeout)
    if args.cluster_command == "kill-broker":
        return kill_broker(cluster_dir, args.broker)
    if args.cluster_command == "start-broker":
        return start_broker(cluster_dir, args.broker, timeout=args.timeout)
    if args.cluster_command == "restart-broker":
        status = stop_broker(cluster_dir, args.broker, timeout=args.timeout, missing_ok=True)
        return status if status else start_broker(cluster_dir, args.broker, timeout=args.timeout)
    return 2


def elect_leaders(
    cluster_dir: Path, bootstrap: str | None, election_type: str, topic: str | None, partitions: list[int] | None
) -> int:
    """Admin's elect_leaders (the ElectLeaders API, sent to the controller); prints one line per
    partition: ``elected``, or Kafka's error (ELECTION_NOT_NEEDED is not a failure)."""
    from odradek.client import Admin
    from odradek.errors import ErrorCode, KafkaError

    if bootstrap is None:
        state = read_cluster_file(cluster_dir) or {}
        brokers = state.get("brokers") or []
        bootstrap = ",".join(f"{b['host']}:{b['port']}" for b in brokers) or "127.0.0.1:9092"
    try:
        with Admin(bootstrap_servers=bootstrap, client_id="odradek-cluster") as admin:
            tps = None
            if topic is not None:
                try:
                    described = admin.describe_topics([topic], timeout=30)
                except KafkaError as exc:
                    if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        _err(f"topic {topic} does not exist")
                        return 1
                    raise
                known = sorted(p.partition for p in described[topic].partitions)
                tps = [(topic, p) for p in (partitions or known)]
            results = admin.elect_leaders(election_type, tps, timeout=30)
    except (ConnectionError, TimeoutError, KafkaError) as exc:
        _err(str(exc))
        return 1
    failed = 0
    for (t, p), error in sorted(results.items()):
        ok = error is None or error.code == ErrorCode.ELECTION_NOT_NEEDED
        failed += not ok
        print(f"{t}-{p}: {'elected' if error is None else error.code.name}")
    return 0 if not failed else 1


def _err(message: str) -> None:
    print(f"odradek cluster: {message}", file=sys.stderr)


# -- cluster.json and process checks ------------------------------------------------------------


def read_cluster_file(cluster_dir: Path) -> dict[str, Any] | None:
    """The ``cluster.json`` of a cluster directory, or None if there is none."""
    try:
        data = json.loads((cluster_dir / CLUSTER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_cluster_file(cluster_dir: Path, data: dict[str, Any]) -> None:
    tmp = cluster_dir / (CLUSTER_FILE + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(cluster_dir / CLUSTER_FILE)


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _is_our_broker(pid: int, data_dir: str) -> bool:
    """Whether ``pid`` still is ``python -m odradek serve ... --data-dir DATA_DIR`` (PIDs get reused)."""
    args = _cmdline(pid)
    if "serve" not in args or "--data-dir" not in args:
        return False
    i = args.index("--data-dir")
    if i + 1 >= len(args) or args[i + 1] != data_dir:
        return False
    return "odradek" in args or any(os.path.basename(a) == "odradek" for a in args)


def _is_odradek_serve(pid: int) -> bool:
    """Whether ``pid`` is an ``odradek serve`` process (``python -m odradek serve`` or ``odradek serve``)."""
    args = _cmdline(pid)
    if "serve" not in args:
        return False
    return "odradek" in args or any(os.path.basename(a) == "odradek" for a in args)


def _local_host(host: Any) -> bool:
    """Whether a broker registered at ``host`` runs on this machine (its PID means something here)."""
    if not isinstance(host, str):
        return False
    if host in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "") or host.startswith("127."):
        return True
    return host in (socket.gethostname(), socket.getfqdn())


def _broker_alive(broker: dict[str, Any]) -> bool:
    from odradek.coordination.zkserver import process_alive

    pid = broker.get("pid")
    return isinstance(pid, int) and process_alive(pid) and _is_our_broker(pid, str(broker.get("data_dir")))


def _zookeeper(cluster_dir: Path, port: int) -> Any:
    from odradek.coordination.zkserver import ZooKeeperServer

    return ZooKeeperServer(cluster_dir / "zookeeper", port=port)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_bytes()[-16384:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# -- up ---------------------------------------------------------------------------------------------


def cluster_up(
    cluster_dir: Path,
    *,
    brokers: int,
    zookeeper_port: int,
    base_port: int,
    overrides: list[str],
    log_level: str = "INFO",
    timeout: float = 60.0,
    security: str = "plaintext",
) -> int:
    """``odradek cluster up``: start a ZooKeeper and ``brokers`` brokers under ``cluster_dir`` (ports from
    ``zookeeper_port`` and ``base_port``; ``overrides`` as KEY=VALUE broker settings) and wait until every
    broker is ready; returns 0, 1 when the cluster did not come up, 2 when ZooKeeper cannot run here
    or the options are invalid."""
    from odradek.coordination.zkserver import ZooKeeperError, zookeeper_available

    problem = zookeeper_available()
    if problem is not None:
        _err(problem)
        return 2
    if brokers < 1:
        _err("--brokers must be at least 1")
        return 2
    for item in overrides:
        if "=" not in item:
            _err(f"--override {item!r}: expected KEY=VALUE")
            return 2
    existing = read_cluster_file(cluster_dir)
    if existing is not None:
        zk_info = existing.get("zookeeper", {})
        zk_running = _zookeeper(cluster_dir, int(zk_info.get("port", 0))).running()
        if zk_running or any(_broker_alive(b) for b in existing.get("brokers", [])):
            _err(f"a cluster is already running in {cluster_dir} (stop it with: odradek cluster down --dir {cluster_dir})")
            return 1
    cluster_dir.mkdir(parents=True, exist_ok=True)

    zk = _zookeeper(cluster_dir, zookeeper_port)
    try:
        zk.start(timeout=timeout)
    except ZooKeeperError as exc:
        _err(str(exc))
        return 1
    state: dict[str, Any] = {
        "version": 1,
        "dir": str(cluster_dir),
        "zookeeper": {"connect": zk.connect, "port": zk.port, "pid": zk.pid, "dir": str(zk.data_dir)},
        "overrides": list(overrides),
        "log_level": log_level,
        "brokers": [],
        "bootstrap_servers": "",
    }
    if security == "sasl_ssl":
        try:
            state["config"] = str(_secure_setup(cluster_dir, zk.connect))
        except (OSError, RuntimeError) as exc:
            _err(f"setting up SASL_SSL: {exc}")
            zk.stop()
            return 1
        state["secure_listener"] = True
    procs: list[subprocess.Popen[bytes]] = []
    offsets: list[int] = []
    for i in range(1, brokers + 1):
        b = _broker_entry(cluster_dir, i, 0 if base_port == 0 else base_port + i - 1)
        proc, offset = _spawn(state, b)
        procs.append(proc)
        offsets.append(offset)
        state["brokers"].append(b)
    _write_cluster_file(cluster_dir, state)  # before waiting: `down` can clean up whatever happens next

    failure = _wait_ready(state["brokers"], procs, offsets, timeout)
    if failure is not None:
        _err(failure)
        _err("stopping what was started")
        cluster_down(cluster_dir, timeout=10.0, quiet=True)
        return 1
    state["bootstrap_servers"] = ",".join(f"{b['host']}:{b['port']}" for b in state["brokers"])
    _write_cluster_file(cluster_dir, state)
    if not _wait_controller_known(state["brokers"], timeout):
        _err(f"warning: after {timeout:g}s not every broker names the controller yet; clients may wait for it")

    print(f"ZooKeeper  {zk.connect}  pid {zk.pid}  ({zk.data_dir})")
    for b in state["brokers"]:
        print(f"broker {b['id']}   {b['host']}:{b['port']}  pid {b['pid']}  log {b['log']}")
    print(f"bootstrap servers: {state['bootstrap_servers']}")
    if state.get("secure_listener"):
        secure = ",".join(f"{b['host']}:{b['secure_port']}" for b in state["brokers"] if b.get("secure_port"))
        props = cluster_dir / "client-sasl-ssl.properties"
        text = props.read_text().replace("bootstrap.servers=\n", f"bootstrap.servers={secure}\n")
        props.write_text(text)
        print(f"SASL_SSL (SCRAM-SHA-512, user admin): {secure}; client settings in {props}")
    print(f"status: odradek cluster status --dir {cluster_dir}")
    print(f"stop:   odradek cluster down --dir {cluster_dir}")
    return 0


def _wait_controller_known(brokers: list[dict[str, Any]], timeout: float) -> bool:
    """Until every broker's metadata names the controller and every broker.  A broker is ready
    once registered but learns the controller from the controller's first UpdateMetadata; a
    client asking in between hears "no controller" (as from Kafka), and librdkafka's admin
    client then waits for a metadata refresh that can be tens of seconds away."""
    from odradek.client import Admin
    from odradek.errors import KafkaError

    deadline = time.monotonic() + timeout
    pending = list(brokers)
    while pending:
        b = pending[0]
        try:
            with Admin({"bootstrap.servers": f"{b['host']}:{b['port']}"}) as admin:
                described = admin.describe_cluster(timeout=max(min(5.0, deadline - time.monotonic()), 0.5))
            if described.controller_id >= 0 and len(described.brokers) >= len(brokers):
                pending.pop(0)
                continue
        except (KafkaError, ConnectionError, TimeoutError, OSError):
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _broker_entry(cluster_dir: Path, broker_id: int, port: int) -> dict[str, Any]:
    return {
        "id": broker_id,
        "pid": None,
        "host": _HOST,
        "port": port,
        "data_dir": str(cluster_dir / f"broker-{broker_id}"),
        "log": str(cluster_dir / f"broker-{broker_id}.log"),
    }


def _spawn(state: dict[str, Any], b: dict[str, Any]) -> tuple[subprocess.Popen[bytes], int]:
    """Start broker ``b`` detached, its output appended to its log; the process and where its output starts."""
    connect = str(state.get("zookeeper", {}).get("connect", ""))
    cmd = [sys.executable, "-m", "odradek", "serve", "--zookeeper", connect, "--broker-id", str(b["id"])]
    if state.get("secure_listener"):
        # listeners instead of --host/--port (which would replace them): PLAINTEXT for the
        # cluster's own tools on loopback, SASL_SSL for clients and the brokers themselves
        host = str(b.get("host") or _HOST)
        cmd += ["--override", f"listeners=PLAINTEXT://{host}:{b.get('port') or 0},SASL_SSL://{host}:{b.get('secure_port') or 0}"]
        cmd += ["--data-dir", str(b["data_dir"])]
    else:
        cmd += ["--host", str(b.get("host") or _HOST), "--port", str(b.get("port") or 0), "--data-dir", str(b["data_dir"])]
    cmd += ["--log-level", str(state.get("log_level") or "INFO")]
    if state.get("config"):
        cmd += ["--config", str(state["config"])]
    for item in state.get("overrides") or []:
        cmd += ["--override", str(item)]
    log_path = Path(b["log"])
    offset = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    b["pid"] = proc.pid
    return proc, offset


def _wait_ready(
    brokers: list[dict[str, Any]], procs: list[subprocess.Popen[bytes]], offsets: list[int], timeout: float
) -> str | None:
    """Wait for every broker's ready line (filling in its port); an error message, or None."""
    deadline = time.monotonic() + timeout
    pending = set(range(len(brokers)))
    while pending:
        for i in sorted(pending):
            b = brokers[i]
            log_path = Path(b["log"])
            try:
                with open(log_path, "rb") as f:
                    f.seek(offsets[i])
                    text = f.read().decode("utf-8", "replace")
            except OSError:
                text = ""
            m = _READY.search(text)
            if m:
                b["host"], b["port"] = m.group("host"), int(m.group("port"))
                secure = _READY_SECURE.search(text)
                if secure:
                    b["secure_port"] = int(secure.group("port"))
                pending.discard(i)
            elif procs[i].poll() is not None:
                return f"broker {b['id']} exited with status {procs[i].returncode}:\n{_tail(log_path)}"
        if not pending:
            break
        if time.monotonic() >= deadline:
            ids = ", ".join(str(brokers[i]["id"]) for i in sorted(pending))
            last = brokers[min(pending)]
            return f"broker(s) {ids} not ready after {timeout:g}s; {last['log']}:\n{_tail(Path(last['log']))}"
        time.sleep(0.1)
    return None


# -- status -----------------------------------------------------------------------------------------


def _kazoo_client(connect: str, timeout: float) -> Any:
    """A started KazooClient; raises if ZooKeeper does not answer within ``timeout`` s."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=connect, timeout=min(timeout, 10.0), connection_retry={"max_tries": 3, "delay": 0.2})
    client.start(timeout=timeout)
    return client


def _znode_json(client: Any, path: str) -> Any:
    from kazoo.exceptions import NoNodeError

    try:
        data, _stat = client.get(path)
    except NoNodeError:
        return None
    try:
        return json.loads(data.decode("utf-8")) if data else None
    except ValueError:
        return data.decode("utf-8", "replace")


def _children(client: Any, path: str) -> list[str]:
    from kazoo.exceptions import NoNodeError

    try:
        return list(client.get_children(path))
    except NoNodeError:
        return []


def _int_sorted(names: list[str]) -> list[str]:
    return sorted(names, key=lambda s: (0, int(s), s) if s.isdigit() else (1, 0, s))


def read_status(client: Any) -> dict[str, Any]:
    """Brokers, controller and partition states from ZooKeeper (Kafka's znode layout), via a kazoo client."""
    brokers: list[dict[str, Any]] = []
    for name in _int_sorted(_children(client, "/brokers/ids")):
        info = _znode_json(client, f"/brokers/ids/{name}")
        info = info if isinstance(info, dict) else {}
        brokers.append(
            {
                "id": int(name) if name.isdigit() else name,
                "host": info.get("host"),
                "port": info.get("port"),
                "endpoints": info.get("endpoints", []),
                "pid": info.get("pid") if isinstance(info.get("pid"), int) else None,
            }
        )
    live = {b["id"] for b in brokers}
    controller = _znode_json(client, "/controller")
    controller_id = controller.get("brokerid") if isinstance(controller, dict) else None
    epoch = _znode_json(client, "/controller_epoch")
    partitions: list[dict[str, Any]] = []
    for topic in sorted(_children(client, "/brokers/topics")):
        assignment = _znode_json(client, f"/brokers/topics/{topic}")
        replicas_by_partition = assignment.get("partitions", {}) if isinstance(assignment, dict) else {}
        for p in _int_sorted(list(replicas_by_partition)):
            replicas = list(replicas_by_partition[p])
            st = _znode_json(client, f"/brokers/topics/{topic}/partitions/{p}/state")
            st = st if isinstance(st, dict) else {}
            leader = st.get("leader")
            isr = list(st.get("isr", []))
            partitions.append(
                {
                    "topic": topic,
                    "partition": int(p),
                    "leader": leader,
                    "leader_epoch": st.get("leader_epoch"),
                    "replicas": replicas,
                    "isr": isr,
                    "under_replicated": len(set(isr) & set(replicas)) < len(replicas),
                    "offline": leader is None or leader == -1 or leader not in live,
                }
            )
    return {
        "brokers": brokers,
        "controller": controller_id,
        "controller_epoch": epoch if isinstance(epoch, int) else None,
        "partitions": partitions,
        "under_replicated": sum(1 for p in partitions if p["under_replicated"]),
        "offline": sum(1 for p in partitions if p["offline"]),
    }


def _ids(values: list[Any]) -> str:
    return ",".join(str(v) for v in values) or "-"


def cluster_status(cluster_dir: Path, *, zookeeper: str | None, as_json: bool, timeout: float = 10.0) -> int:
    """``odradek cluster status``: the brokers registered in the cluster's ZooKeeper (the one recorded in
    ``cluster_dir``, or ``zookeeper``), the controller and the partitions' leaders, as a table or JSON;
    returns 0, or 1 when there is no cluster or its ZooKeeper is unreachable."""
    recorded = read_cluster_file(cluster_dir)
    connect = zookeeper
    if connect is None:
        if recorded is None:
            _err(f"no cluster in {cluster_dir} (no {CLUSTER_FILE}); start one with: odradek cluster up")
            return 1
        connect = str(recorded.get("zookeeper", {}).get("connect", ""))
    try:
        client = _kazoo_client(connect, timeout)
    except Exception as exc:  # kazoo raises its own timeout types, and OSError-likes
        _err(f"ZooKeeper at {connect} is not reachable: {exc or type(exc).__name__}")
        return 1
    try:
        status = read_status(client)
    finally:
        client.stop()
        client.close()
    status["zookeeper"] = connect
    pids = {b["id"]: b for b in (recorded or {}).get("brokers", [])} if zookeeper is None else {}
    for b in status["brokers"]:
        rec = pids.get(b["id"])
        if b["pid"] is None and rec is not None and _broker_alive(rec):  # a broker without the pid field
            b["pid"] = rec.get("pid")
    status["not_registered"] = [
        {"id": i, "pid": rec.get("pid"), "running": _broker_alive(rec)}
        for i, rec in sorted(pids.items())
        if i not in {b["id"] for b in status["brokers"]}
    ]
    if as_json:
        print(json.dumps(status, indent=2))
        return 0

    print(f"ZooKeeper: {connect}")
    print(f"Brokers ({len(status['brokers'])} registered):")
    for b in status["brokers"]:
        endpoints = ",".join(b["endpoints"]) or f"{b['host']}:{b['port']}"
        pid = f"  pid {b['pid']}" if b.get("pid") else ""
        mark = "  (controller)" if b["id"] == status["controller"] else ""
        print(f"  {b['id']}  {endpoints}{pid}{mark}")
    for nr in status["not_registered"]:
        print(f"  {nr['id']}  NOT REGISTERED  pid {nr['pid']} ({'running' if nr['running'] else 'not running'})")
    controller = status["controller"]
    epoch = f" (epoch {status['controller_epoch']})" if status["controller_epoch"] is not None else ""
    print(f"Controller: {'none' if controller is None else f'broker {controller}'}{epoch}")
    if status["partitions"]:
        width = max(5, *(len(p["topic"]) for p in status["partitions"]))
        print(f"{'TOPIC':<{width}}  PARTITION  LEADER  REPLICAS  ISR")
        for p in status["partitions"]:
            leader = "none" if p["leader"] is None or p["leader"] == -1 else str(p["leader"])
            flags = " ".join(f for f, on in (("under-replicated", p["under_replicated"]), ("offline", p["offline"])) if on)
            print(
                f"{p['topic']:<{width}}  {p['partition']:<9}  {leader:<6}  {_ids(p['replicas']):<8}  "
                f"{_ids(p['isr'])}{'  ' + flags if flags else ''}"
            )
    else:
        print("No topics.")
    print(f"Under-replicated partitions: {status['under_replicated']}")
    print(f"Offline partitions: {status['offline']}")
    return 0


# -- live brokers, stop / start / kill ------------------------------------------------------------


def live_brokers(cluster_dir: Path, state: dict[str, Any], timeout: float = 5.0) -> dict[int, dict[str, Any]]:
    """The brokers running now, by id: those registered in ZooKeeper (their PID from the
    registration, when they run on this machine) and those recorded in ``cluster.json`` whose PID
    still is that broker.  Each: id, pid (None: not known here), host, port, registered."""
    found: dict[int, dict[str, Any]] = {}
    connect = str(state.get("zookeeper", {}).get("connect", ""))
    try:
        client = _kazoo_client(connect, timeout)
    except Exception:
        client = None
    if client is not None:
        try:
            for name in _children(client, "/brokers/ids"):
                if not name.isdigit():
                    continue
                info = _znode_json(client, f"/brokers/ids/{name}")
                info = info if isinstance(info, dict) else {}
                raw_pid = info.get("pid")
                pid = raw_pid if isinstance(raw_pid, int) and _local_host(info.get("host")) else None
                known = pid is not None
                if pid is not None and not _is_odradek_serve(pid):
                    continue  # left by a broker that is gone (SIGKILL): it lasts until its session expires
                found[int(name)] = {
                    "id": int(name),
                    "pid": pid if known else None,
                    "host": info.get("host"),
                    "port": info.get("port"),
                    "registered": True,
                }
        except Exception:
            pass
        finally:
            client.stop()
            client.close()
    for b in state.get("brokers", []):
        i = b.get("id")
        if not isinstance(i, int) or not _broker_alive(b):
            continue
        if i not in found:
            found[i] = {"id": i, "pid": b["pid"], "host": b.get("host"), "port": b.get("port"), "registered": False}
        elif found[i]["pid"] is None:
            found[i]["pid"] = b["pid"]  # registered by a broker that does not record its PID
    return found


def _wait_gone(pid: int, timeout: float) -> bool:
    from odradek.coordination.zkserver import process_alive

    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _stop_pid(broker_id: Any, pid: int, timeout: float, say: Any) -> bool:
    """SIGTERM (controlled shutdown), SIGKILL after ``timeout`` s; whether the process is gone."""
    t0 = time.monotonic()
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    if _wait_gone(pid, timeout):
        say(f"broker {broker_id}: stopped (pid {pid}, {time.monotonic() - t0:.1f}s)")
        return True
    if _is_odradek_serve(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if _wait_gone(pid, 10.0):
        say(f"broker {broker_id}: killed (pid {pid}) after {timeout:g}s without exiting")
        return True
    _err(f"broker {broker_id} (pid {pid}) did not exit")
    return False


def _require_state(cluster_dir: Path) -> dict[str, Any] | None:
    state = read_cluster_file(cluster_dir)
    if state is None:
        _err(f"no cluster in {cluster_dir} (no {CLUSTER_FILE}); start one with: odradek cluster up")
    return state


def _unknown_pid(b: dict[str, Any]) -> str:
    return (
        f"broker {b['id']} is registered at {b.get('host')}:{b.get('port')} but its process is not known here "
        "(another machine, or a broker that does not register its pid)"
    )


def stop_broker(cluster_dir: Path, broker_id: int, *, timeout: float = 60.0, missing_ok: bool = False) -> int:
    """``odradek cluster stop-broker``: SIGTERM broker ``broker_id`` of the cluster and wait up to ``timeout``
    for its clean shutdown; returns 0, or 1 when it is not running (0 with ``missing_ok``) or does not
    stop."""
    state = _require_state(cluster_dir)
    if state is None:
        return 1
    b = live_brokers(cluster_dir, state).get(broker_id)
    if b is None:
        if missing_ok:
            return 0
        _err(f"broker {broker_id} is not running")
        return 1
    if b["pid"] is None:
        _err(_unknown_pid(b))
        return 1
    return 0 if _stop_pid(broker_id, int(b["pid"]), timeout, print) else 1


def kill_broker(cluster_dir: Path, broker_id: int) -> int:
    """``odradek cluster kill-broker``: SIGKILL broker ``broker_id`` (a crash: its registration stays until
    its ZooKeeper session expires); returns 0, or 1 when it is not running or does not exit."""
    state = _require_state(cluster_dir)
    if state is None:
        return 1
    b = live_brokers(cluster_dir, state).get(broker_id)
    if b is None:
        _err(f"broker {broker_id} is not running")
        return 1
    if b["pid"] is None:
        _err(_unknown_pid(b))
        return 1
    pid = int(b["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not _wait_gone(pid, 10.0):
        _err(f"broker {broker_id} (pid {pid}) did not exit after SIGKILL")
        return 1
    print(f"broker {broker_id}: killed (pid {pid}); its registration stays until its ZooKeeper session expires")
    return 0


def start_broker(cluster_dir: Path, broker_id: int, *, timeout: float = 60.0) -> int:
    """Start broker ``broker_id`` as ``up`` did (a new id gets ``broker-N`` and a free port)."""
    state = _require_state(cluster_dir)
    if state is None:
        return 1
    if broker_id < 0:
        _err("the broker id must not be negative")
        return 2
    zk_port = int(state.get("zookeeper", {}).get("port", 0))
    if not _zookeeper(cluster_dir, zk_port).running():
        _err(f"ZooKeeper of {cluster_dir} is not running (start the cluster with: odradek cluster up)")
        return 1
    running = live_brokers(cluster_dir, state).get(broker_id)
    if running is not None:
        where = f"pid {running['pid']}" if running["pid"] is not None else f"at {running['host']}:{running['port']}"
        _err(f"broker {broker_id} is already running ({where})")
        return 1
    brokers = state.setdefault("brokers", [])
    b = next((x for x in brokers if x.get("id") == broker_id), None)
    if b is None:
        b = _broker_entry(cluster_dir, broker_id, 0)
        brokers.append(b)
    proc, offset = _spawn(state, b)
    _write_cluster_file(cluster_dir, state)
    failure = _wait_ready([b], [proc], [offset], timeout)
    if failure is not None:
        _err(failure)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        return 1
    state["bootstrap_servers"] = ",".join(f"{x['host']}:{x['port']}" for x in brokers if x.get("port"))
    _write_cluster_file(cluster_dir, state)
    print(f"broker {broker_id}: started {b['host']}:{b['port']}  pid {b['pid']}  log {b['log']}")
    return 0


# -- down -------------------------------------------------------------------------------------------


def _controller_id(connect: str) -> Any:
    """The controller's broker id, best effort (None if ZooKeeper does not answer quickly)."""
    try:
        client = _kazoo_client(connect, 3.0)
    except Exception:
        return None
    try:
        controller = _znode_json(client, "/controller")
        return controller.get("brokerid") if isinstance(controller, dict) else None
    except Exception:
        return None
    finally:
        client.stop()
        client.close()


def cluster_down(cluster_dir: Path, *, timeout: float = 60.0, quiet: bool = False) -> int:
    """Stop every running broker (registered in ZooKeeper or recorded here), the controller last,
    each within ``timeout`` s (then SIGKILL); then ZooKeeper, unless a registered broker could not
    be stopped (ZooKeeper is not pulled from under a running broker)."""
    from odradek.coordination.zkserver import ZooKeeperError

    def say(message: str) -> None:
        if not quiet:
            print(message)

    state = read_cluster_file(cluster_dir)
    if state is None:
        _err(f"no cluster in {cluster_dir} (no {CLUSTER_FILE})")
        return 1
    zk_info = state.get("zookeeper", {})
    status = 0
    left: list[dict[str, Any]] = []
    for _round in range(2):  # a second look: a broker that registered while the others stopped
        live = live_brokers(cluster_dir, state)
        if _round == 0:
            for b in state.get("brokers", []):
                if b.get("id") not in live:
                    say(f"broker {b.get('id')}: not running")
        stoppable = [b for b in live.values() if b["pid"] is not None]
        left = [b for b in live.values() if b["pid"] is None]
        if not stoppable:
            break
        # the controller last: stopping it moves the controller role, once instead of at every step
        controller = _controller_id(str(zk_info.get("connect", ""))) if len(stoppable) > 1 else None
        stoppable.sort(key=lambda b: (b["id"] == controller, b["id"]))
        for b in stoppable:
            if not _stop_pid(b["id"], int(b["pid"]), timeout, say):
                status = 1
                left.append(b)
    zk = _zookeeper(cluster_dir, int(zk_info.get("port", 0)))
    if left:
        for b in left:
            _err(_unknown_pid(b) if b["pid"] is None else f"broker {b['id']} (pid {b['pid']}) is still running")
        _err("ZooKeeper left running: stop these brokers, then run `odradek cluster down` again")
        return 1
    zk_pid = zk.pid
    try:
        if zk.running():
            zk.stop()
            say(f"ZooKeeper: stopped (pid {zk_pid})")
        else:
            say("ZooKeeper: not running")
    except ZooKeeperError as exc:
        _err(str(exc))
        status = 1
    if status == 0:
        (cluster_dir / CLUSTER_FILE).unlink(missing_ok=True)
    return status
