"""Run one benchmark on an earlier commit and on this checkout, alternately, in one run.

    .venv/bin/python bench/before_after.py BENCH [--base COMMIT] [--after COMMIT] [--rounds 2]
                                           [-- BENCH ARGS...]
    e.g. .venv/bin/python bench/before_after.py replay_bench.py --base 8e4f4fc -- --file var/bench_session.jsonl

Both commits (the later one defaults to HEAD) are checked out as git worktrees in a temporary
folder (removed afterwards), so edits in progress in this checkout change neither, and run with
this checkout's virtualenv; the two alternate round by round, so both see the
same machine load. Each benchmark already prints its figures as ratios to rlm-code's load
measured in its own run: compare those ratios, not seconds. Prints each run's output whole.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The last commit before this wave's refactor (issue 16): the compiled path and the parse worker
# were still there.
DEFAULT_BASE = "8e4f4fc"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", help="a script under bench/, e.g. replay_bench.py")
    parser.add_argument("--base", default=DEFAULT_BASE)
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--rounds", type=int, default=2)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    options = parser.parse_args(argv[:split])
    extra = argv[split + 1 :]  # after --: the benchmark's own arguments
    # Paths given to the benchmark are resolved here, so both trees read the same file.
    extra = [str(Path(a).resolve()) if Path(a).exists() else a for a in extra]
    with tempfile.TemporaryDirectory(prefix="replay_base_") as tmp:
        trees = {}
        for label, commit in (("before", options.base), ("after", options.after)):
            trees[f"{label} ({commit})"] = tree = Path(tmp) / label
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit],
                           check=True, capture_output=True)  # fmt: skip
        try:
            for round_number in range(1, options.rounds + 1):
                for label, tree in trees.items():
                    print(f"===== round {round_number}, {label} =====", flush=True)
                    subprocess.run([sys.executable, str(tree / "bench" / options.bench), *extra], cwd=tree, check=True)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


if __name__ == "__main__":
    main()
