#!/usr/bin/env python3
"""Run a command against a throw-away PostgreSQL server: `with_postgres.py -- CMD ARGS...`.

Creates a cluster in a temporary directory (initdb), starts it on a free loopback port, exports
DATABASE_URL for CMD, and always stops and removes the server afterwards, even when CMD fails or
is interrupted. PostgreSQL refuses to run as root, so as root the server runs as the `postgres`
system user (present wherever Debian's postgresql package is).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

DB_USER = "replay"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def find_tool(name: str) -> str:
    path = shutil.which(name)
    if path:
        return path
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    sys.exit(f"with_postgres: {name} not found (install PostgreSQL 15: apt-get install postgresql)")


def as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        sys.exit("with_postgres: running as root needs a 'postgres' system user to own the server")
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "postgres", "--", *argv]
    return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(map(shlex_quote, argv))]


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        sys.exit("usage: with_postgres.py -- COMMAND [ARGS...]")

    initdb, pg_ctl = find_tool("initdb"), find_tool("pg_ctl")
    workdir = Path(tempfile.mkdtemp(prefix="replay-pg-"))
    datadir, sockdir = workdir / "data", workdir / "sock"
    sockdir.mkdir()
    if os.geteuid() == 0:
        server = pwd.getpwnam("postgres")
        for path in (workdir, sockdir):
            os.chown(path, server.pw_uid, server.pw_gid)
    port = free_port()
    log = workdir / "server.log"
    started = False
    try:
        subprocess.run(
            as_server_user([initdb, "-D", str(datadir), "-U", DB_USER, "--auth=trust",
                            "--encoding=UTF8", "--no-locale", "--no-sync"]),
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        options = (
            f"-p {port} -k {sockdir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=60"
        )
        subprocess.run(
            as_server_user([pg_ctl, "-D", str(datadir), "-l", str(log), "-o", options,
                            "-w", "-t", "60", "start"]),
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        started = True
        env = dict(os.environ, DATABASE_URL=f"postgres://{DB_USER}@127.0.0.1:{port}/postgres")
        print(f"with_postgres: PostgreSQL on 127.0.0.1:{port} ({datadir})", flush=True)
        child = subprocess.Popen(argv, env=env)
        try:
            return child.wait()
        except KeyboardInterrupt:
            child.send_signal(signal.SIGINT)
            return child.wait()
    except subprocess.CalledProcessError as exc:
        if log.exists():
            sys.stderr.write(log.read_text(errors="replace"))
        print(f"with_postgres: could not start PostgreSQL: {exc}", file=sys.stderr)
        return 1
    finally:
        if started:
            subprocess.run(
                as_server_user([pg_ctl, "-D", str(datadir), "-m", "fast", "-w", "stop"]),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
