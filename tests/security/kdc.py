"""A real MIT Kerberos KDC (Debian's krb5-kdc) for the GSSAPI tests: its own realm, database,
configuration and port under a temporary directory, started by the test and stopped by PID."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

REALM = "EXAMPLE.TEST"


def _free_port() -> int:
    """A port free for both TCP and UDP on 127.0.0.1 at the time of asking (the KDC listens on both)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            try:
                u.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no port free for both TCP and UDP on 127.0.0.1")


# How many ports start() tries. A port found free can be taken before the KDC binds it (another
# test's outgoing connection gets it as its local port); the KDC then exits with "Address already
# in use", and start() tries a new one.
_START_ATTEMPTS = 5


class MitKdc:
    def __init__(self, directory: Path) -> None:
        for tool in ("kdb5_util", "krb5kdc", "kadmin.local", "kinit"):
            if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
                pytest.fail(f"{tool} is missing: apt-get install krb5-kdc krb5-admin-server krb5-user")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.krb5_conf = self.dir / "krb5.conf"
        self.log = self.dir / "kdc.log"
        (self.dir / "kadm5.acl").write_text("")
        self.env = {**os.environ, "KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.dir / "kdc.conf")}
        self.proc: subprocess.Popen[bytes] | None = None
        self._configure(_free_port())

    def _configure(self, port: int) -> None:
        """Point the KDC and its clients at ``port``, on 127.0.0.1 only (TCP and UDP)."""
        self.port = port
        self.krb5_conf.write_text(
            f"[libdefaults]\n default_realm = {REALM}\n dns_lookup_kdc = false\n dns_lookup_realm = false\n"
            " rdns = false\n dns_canonicalize_hostname = false\n udp_preference_limit = 1\n"
            f"[realms]\n {REALM} = {{\n  kdc = 127.0.0.1:{self.port}\n }}\n"
        )
        (self.dir / "kdc.conf").write_text(
            f"[kdcdefaults]\n kdc_listen = 127.0.0.1:{self.port}\n kdc_tcp_listen = 127.0.0.1:{self.port}\n"
            f"[realms]\n {REALM} = {{\n  database_name = {self.dir}/principal\n"
            f"  key_stash_file = {self.dir}/stash\n  acl_file = {self.dir}/kadm5.acl\n"
            "  supported_enctypes = aes256-cts-hmac-sha1-96:normal\n }\n"
            f"[logging]\n kdc = FILE:{self.log}\n"
        )

    def _run(self, *cmd: str) -> None:
        r = subprocess.run(list(cmd), env=self.env, capture_output=True, timeout=60)
        assert r.returncode == 0, f"{cmd}: {r.stderr.decode()}"

    def start(self) -> MitKdc:
        self._run("kdb5_util", "create", "-s", "-r", REALM, "-P", "master-password-for-tests")
        log = self.log
        for attempt in range(_START_ATTEMPTS):
            if attempt:
                self._configure(_free_port())
            log.write_text("")
            if self._launch():
                return self
            text = log.read_text(errors="replace")
            if "Address already in use" not in text:
                raise RuntimeError(f"krb5kdc exited: {text[-2000:]}")
        raise RuntimeError(f"krb5kdc found no free port in {_START_ATTEMPTS} tries: {log.read_text(errors='replace')[-2000:]}")

    def _launch(self) -> bool:
        """Start krb5kdc on the configured port; whether it listens (False: it exited)."""
        self.proc = subprocess.Popen(["krb5kdc", "-n", "-r", REALM], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log = self.log
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            # its own word that it bound its sockets (something else may answer on the port)
            if "commencing operation" in log.read_text(errors="replace"):
                return True
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("krb5kdc did not listen")

    def principal(self, name: str) -> Path:
        """Add ``name`` with a random key; its keytab."""
        keytab = self.dir / (name.replace("/", "_") + ".keytab")
        self._run("kadmin.local", "-r", REALM, "-q", f"addprinc -randkey {name}@{REALM}")
        self._run("kadmin.local", "-r", REALM, "-q", f"ktadd -k {keytab} {name}@{REALM}")
        return keytab

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
