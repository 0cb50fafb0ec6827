"""A web process's memory while people open the player on a session with large variables, under
the production server (`manage.py serve`: granian), measured from outside by its RSS.

    .venv/bin/python bench/web_memory_bench.py [--views 24] [--variable-mb 6] [--port 8799]

1. Makes a throw-away data folder and SQLite database, and a session of 24 events whose state
   changes set three variables of --variable-mb MB each (an agent that keeps a large document in
   a variable; the context panel shows each cut to 1,000 characters).
2. Starts `manage.py serve` on --port (web processes + a job worker), signs a user in, and
   opens the player --views times at different events, printing the RSS of every web process
   after each fourth view.
Before the fix this measures (e3a9adb), one view's decoded state stayed in reference cycles until
a garbage collection: the serving process grew ~35 MB a view, to ~740 MB after 16 views. A flat
line is the target: what a view reads is freed when it ends. There is no reference to compare
with (rlm-code has no server); the figures are the web process's own, so compare runs.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import requests

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "bench-" + secrets.token_hex(8)


def session_file(path: Path, variable_mb: float) -> None:
    big = "v" * int(variable_mb * 1_000_000)
    lines = [orjson.dumps({"kind": "session_start", "payload": {"task": "memory bench"}, "source_type": "bench"})]
    for i in range(3):
        change = {"variables": {f"document_{i}": big}}
        lines.append(orjson.dumps({"kind": "note", "payload": {"i": i}, "state_change": change}))
    lines += [orjson.dumps({"kind": "note", "payload": {"i": i}}) for i in range(3, 23)]
    path.write_bytes(b"\n".join(lines) + b"\n")


def web_rss(port: int) -> list[int]:
    """The RSS (MiB) of each process serving `port` (granian's main process and its workers)."""
    out = subprocess.run(["ps", "-eo", "pid,rss,args"], capture_output=True, text=True, check=True).stdout
    return sorted(
        int(line.split()[1]) // 1024 for line in out.splitlines() if "granian" in line and f"--port {port}" in line
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--views", type=int, default=24)
    parser.add_argument("--variable-mb", type=float, default=6.0)
    parser.add_argument("--port", type=int, default=8799)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="web-memory-"))
    env = os.environ | {
        "REPLAY_DATA_DIR": str(folder), "DATABASE_URL": f"sqlite:///{folder}/db.sqlite3",
        "REPLAY_SECRET_KEY": secrets.token_urlsafe(50), "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
    }  # fmt: skip
    manage = [sys.executable, str(ROOT / "manage.py")]
    run = {"env": env, "cwd": ROOT, "check": True, "capture_output": True}
    subprocess.run([*manage, "migrate", "-v0"], **run)
    session_file(folder / "large-variables.jsonl", args.variable_mb)
    subprocess.run([*manage, "import_sessions", str(folder / "large-variables.jsonl")], **run)
    subprocess.run([*manage, "createsuperuser", "--noinput", "--username", "bench", "--email", "b@example.org"], **run)
    server = subprocess.Popen([*manage, "serve", "--host", "127.0.0.1", "--port", str(args.port)], env=env, cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    base = f"http://127.0.0.1:{args.port}"
    try:
        client = requests.Session()
        for _ in range(120):
            try:
                if client.get(base + "/accounts/login/", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', client.get(base + "/accounts/login/").text)
        client.post(base + "/accounts/login/", data={"username": "bench", "password": PASSWORD,
                                                     "csrfmiddlewaretoken": token.group(1)},
                    headers={"Referer": base + "/accounts/login/"})  # fmt: skip
        session_id = re.search(r"/sessions/(\d+)/", client.get(base + "/sessions/").text).group(1)
        print(
            f"{args.views} player views of a session with 3 variables of {args.variable_mb:g} MB; python {sys.version.split()[0]}"
        )
        print(f"web processes' RSS (MiB) before: {web_rss(args.port)}")
        started = time.perf_counter()
        for n in range(1, args.views + 1):
            response = client.get(f"{base}/sessions/{session_id}/", params={"step": 5 + n % 15})
            assert response.status_code == 200 and "document_0" in response.text, response.status_code
            if n % 4 == 0:
                print(f"after {n:3d} views: {web_rss(args.port)}")
        print(f"{(time.perf_counter() - started) / args.views * 1000:.0f} ms a view")
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
