"""A private PostgreSQL server for tests and benchmarks that must stop and restart the database:
initdb into a temporary directory, started on a free port, owned by the `postgres` system user
when run as root (initdb refuses root). A shared server is never touched. Its port lies below
the kernel's ephemeral range (`riskstream_tools.ports`), so that it is still free when the
server starts again after a restart."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time

from ..ports import free_port


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


class PrivatePostgres:
    def __init__(self) -> None:
        initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
        if not initdb or not pg_ctl:
            raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        self.initdb, self.pg_ctl = initdb, pg_ctl
        self.root = tempfile.mkdtemp(prefix="rs-pg-")
        self.data = os.path.join(self.root, "data")
        self.port = free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            os.chmod(self.root, 0o755)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._run(self.initdb, "-D", self.data, "-A", "trust", "-U", "postgres",
                  "--no-sync", "-E", "UTF8")

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=120)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        opts = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                f"-c max_connections=50")
        try:
            self._run(self.pg_ctl, "-D", self.data, "-o", opts, "-l", self._log, "-w", "-t",
                      "60", "start")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            # pg_ctl only says that it failed; the server's log says why.
            raise RuntimeError(f"the private PostgreSQL did not start on port {self.port} "
                               f"({exc}); its log ends:\n{self._log_tail()}") from None

    @property
    def _log(self) -> str:
        return os.path.join(self.root, "log")

    def _log_tail(self, chars: int = 1500) -> str:
        try:
            with open(self._log, errors="replace") as fh:
                return fh.read()[-chars:]
        except OSError as exc:
            return f"(no log: {exc.strerror})"

    def stop(self) -> None:
        self._run(self.pg_ctl, "-D", self.data, "-m", "fast", "-w", "stop")

    def restart_after(self, seconds: float) -> float:
        """Stop, stay down `seconds`, start; returns the wall time the server is back."""
        self.stop()
        time.sleep(seconds)
        self.start()
        return time.monotonic()

    def destroy(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)
