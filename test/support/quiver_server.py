"""bin/quiver as a child process for the Python suites (test/clients, test/fuzz): a free
port of 127.0.0.1, storage and snapshots in a temporary folder, nothing inherited from
the caller's SERVICE__* variables, the log in the folder; stopped with SIGTERM.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def exit_missing(what: str, err: Exception, hint: str) -> None:
    """For a suite whose Python packages are not installed: one failing TAP line that says which and how to install them."""
    print(f"not ok 1 - import {what}")
    print(f"# {sys.executable} cannot import {what} ({err}).")
    print(f"# {hint}")
    print("1..1")
    print("# pass 0")
    print("# fail 1")
    sys.exit(1)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """Starts at once; `wait_ready()` waits for /readyz. `env` adds SERVICE__... settings.
    With `grpc` the public gRPC API listens on `grpc_port` (a free port); else it is off
    (servers of parallel tests would all take the default port 6334)."""

    def __init__(self, prefix: str = "quiver-", env: dict | None = None, root: str = REPO_ROOT, grpc: bool = False) -> None:
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.port = free_port()
        self.grpc_port = free_port() if grpc else None
        self.snapshots = os.path.join(self.dir, "snapshots")
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE__")}
        full_env.update(
            SERVICE__SERVICE__HOST="127.0.0.1",
            SERVICE__SERVICE__HTTP_PORT=str(self.port),
            SERVICE__SERVICE__GRPC_PORT=str(self.grpc_port) if self.grpc_port is not None else "null",
            SERVICE__STORAGE__STORAGE_PATH=os.path.join(self.dir, "storage"),
            SERVICE__STORAGE__SNAPSHOTS_PATH=self.snapshots,
            # Idle connections outlive any pause of the client (a loaded machine): a client never
            # reuses a connection the server is closing at that moment.
            SERVICE__SERVICE__HTTP_KEEP_ALIVE_TIMEOUT_SEC="600",
        )
        full_env.update(env or {})
        self.log_path = os.path.join(self.dir, "quiver.log")
        self.log = open(self.log_path, "wb")
        node = shutil.which("node") or "node"
        self.proc = subprocess.Popen([node, os.path.join(root, "bin", "quiver")], cwd=self.dir, env=full_env, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bin/quiver exited with {self.proc.returncode} before listening: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=1) as res:
                    if res.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"bin/quiver did not answer /readyz within {timeout} s: {self.log_tail()}")

    def log_text(self) -> str:
        try:
            self.log.flush()
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return "(no log)"

    def log_tail(self, n: int = 2000) -> str:
        return self.log_text()[-n:]

    def stop(self, keep: bool = False) -> None:
        """Stops the node; `keep` leaves its folder (log, storage) in place."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)
