"""Records the rlm-code demo sessions of this folder with rlm-code's own writers.

    .venv/bin/python demo/record_rlm_demo.py

Writes rlm_*.jsonl / rlm_*.json next to this script (`python manage.py setup_demo` imports
them): a successful run, a failing run, two runs of one task that diverge (for the diff view),
a TrajectoryLogger file and a SessionSnapshot. The recorder is rlm-code's SessionRecorder; only
its clock is simulated (a fixed start, realistic step durations) so the files are reproducible
and playback at recorded pace looks like a real run.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import rlm_code.rlm.session_replay as session_replay
from rlm_code.rlm.session_replay import SessionRecorder
from rlm_code.rlm.trajectory import TrajectoryLogger

HERE = Path(__file__).resolve().parent


class Clock:
    """A deterministic clock: each reading advances it by the next planned delay."""

    def __init__(self, start: datetime) -> None:
        self.now = start
        self.step_ms = 40.0

    def advance(self, milliseconds: float) -> None:
        self.now += timedelta(milliseconds=milliseconds)

    def iso(self) -> str:
        self.now += timedelta(milliseconds=self.step_ms)
        return self.now.isoformat()

    def epoch(self) -> float:
        self.now += timedelta(milliseconds=self.step_ms)
        return self.now.timestamp()


def recorder(path: Path, clock: Clock, *, run_id: str, task: str, model: str) -> SessionRecorder:
    path.unlink(missing_ok=True)
    session_replay._utc_now = clock.iso
    return SessionRecorder(
        session_id=f"session_{run_id}", run_id=run_id, task=task, environment="pure_rlm",
        model=model, output_path=path,
    )  # fmt: skip


REVENUE_TASK = (
    "Find the three regions with the highest year-over-year revenue growth in sales_2025.csv "
    "and explain the drivers — résumé en français aussi."
)


def llm_turn(rec: SessionRecorder, clock: Clock, prompt: str, answer: str, tokens_in: int, tokens_out: int) -> None:
    rec.record_llm_request(prompt, model=rec.model)
    clock.advance(900 + tokens_out * 6)
    rec.record_llm_response(answer, tokens_in=tokens_in, tokens_out=tokens_out, duration_ms=900 + tokens_out * 6)


def run_step(rec, clock, step, *, code, rationale, output="", error="", reward, tokens, run_ms=180.0):
    rec.record_step_start(step)
    llm_turn(
        rec,
        clock,
        f"Step {step}. Variables so far: {sorted(rec._variables)}. Next cell?",
        f"```python\n{code}\n```",
        1200 + 90 * step,
        len(code) // 3 + 20,
    )
    action = {"action": "run_python", "code": code}
    rec.record_action(action, rationale=rationale)
    clock.advance(run_ms)
    observation = (
        {"success": not error, "output": output} if not error else {"success": False, "stdout": output, "stderr": error}
    )
    rec.record_result(observation, reward=reward, success=not error, duration_ms=run_ms, tokens_used=tokens)
    return action, observation


def end_step(rec, action, observation, reward, tokens, run_ms=180.0):
    rec.record_step_end(
        action, observation, reward=reward, success=observation["success"], duration_ms=run_ms, tokens_used=tokens
    )


def record_success(path: Path) -> None:
    clock = Clock(datetime(2026, 2, 9, 9, 30, tzinfo=UTC))
    rec = recorder(path, clock, run_id="demo_revenue_ok", task=REVENUE_TASK, model="gpt-4o-mini")
    steps = [
        (
            "import pandas as pd\ndf = pd.read_csv('sales_2025.csv')\nprint(df.shape)",
            "Load the data first.",
            "(48210, 7)\n",
            0.1,
        ),
        (
            "print(df.columns.tolist())",
            "Check which columns exist.",
            "['date', 'region', 'product', 'units', 'revenue', 'cost', 'channel']\n",
            0.1,
        ),
        (
            "yoy = df.groupby([df.date.str[:4], 'region']).revenue.sum().unstack(0)\ngrowth = (yoy['2025'] / yoy['2024'] - 1).sort_values(ascending=False)\nprint(growth.head(3))",
            "Year-over-year growth per region.",
            "region\nNordics      0.342\nSouth-East  0.287\nIbérica     0.251\n",
            0.3,
        ),
    ]
    for n, (code, why, out, reward) in enumerate(steps, start=1):
        action, observation = run_step(
            rec, clock, n, code=code, rationale=why, output=out, reward=reward, tokens=1400 + 120 * n
        )
        if n == 1:
            rec.record_variable_update("df", "DataFrame(48210 rows × 7 columns)")
        if n == 3:
            rec.record_variable_update("growth", {"Nordics": 0.342, "South-East": 0.287, "Ibérica": 0.251})
            rec.record_memory_update(["Top growth: Nordics 34 %", "South-East 29 %, Ibérica 25 %"])
            rec.record_child_spawn("child_drivers", "Explain the growth drivers of the Nordics region 🇳🇴", depth=1)
            clock.advance(4200)
            rec.record_child_result(
                "child_drivers", success=True, result="Online channel +61 % (new marketplace), units up, prices flat."
            )
        end_step(rec, action, observation, reward, 1400 + 120 * n)
    rec.create_checkpoint("growth_computed")
    action, observation = run_step(
        rec, clock, 4, code="FINAL('Nordics (+34 %), South-East (+29 %), Ibérica (+25 %); driven by online sales.')",
        rationale="Answer with the three regions and the driver.", output="", reward=0.5, tokens=900,
    )  # fmt: skip
    end_step(rec, action, observation, 0.5, 900)
    rec.record_final(
        "Nordics (+34 %), South-East (+29 %), Ibérica (+25 %); driven by online sales. Résumé : la croissance vient du canal en ligne."
    )
    rec.end_session()


def record_failure(path: Path) -> None:
    clock = Clock(datetime(2026, 2, 9, 11, 5, tzinfo=UTC))
    rec = recorder(
        path,
        clock,
        run_id="demo_invoices_failed",
        task="Reconcile the March invoices in invoices/ against the ledger and list mismatches.",
        model="claude-3-5-sonnet",
    )
    attempts = [
        ("import glob\nfiles = glob.glob('invoices/*.pdf')\nprint(len(files))", "List the invoices.", "214\n", "", 0.1),
        (
            "from pypdf import PdfReader\ntext = PdfReader(files[0]).pages[0].extract_text()",
            "Read the first invoice.",
            "",
            "ModuleNotFoundError: No module named 'pypdf'",
            -0.2,
        ),
        (
            "import PyPDF2\ntext = PyPDF2.PdfReader(files[0]).pages[0].extract_text()",
            "Try the older package name.",
            "",
            "ModuleNotFoundError: No module named 'PyPDF2'",
            -0.2,
        ),
        (
            "import subprocess\nprint(subprocess.run(['pdftotext', files[0], '-'], capture_output=True).stdout[:200])",
            "Fall back to pdftotext.",
            "",
            "FileNotFoundError: [Errno 2] No such file or directory: 'pdftotext'",
            -0.3,
        ),
    ]
    for n, (code, why, out, err, reward) in enumerate(attempts, start=1):
        action, observation = run_step(
            rec, clock, n, code=code, rationale=why, output=out, error=err, reward=reward, tokens=1100 + 80 * n
        )
        if n == 1:
            rec.record_variable_update("files", ["invoices/2026-03-001.pdf", "…", "invoices/2026-03-214.pdf"])
        if err:
            rec.record_error(err, recoverable=n < 4)
            rec.record_memory_update([f"attempt {i}: no PDF reader" for i in range(2, n + 1)])
        end_step(rec, action, observation, reward, 1100 + 80 * n)
    rec.record_error("Giving up: no way to read PDF files in this sandbox", recoverable=False)
    rec.end_session()


def record_divergent_pair(path_a: Path, path_b: Path) -> None:
    task = "Compute the median delivery time per carrier from shipments.parquet"
    plans = {
        path_a: [
            ("import pandas as pd\nship = pd.read_parquet('shipments.parquet')", "", 0.1),
            ("ship['days'] = (ship.delivered - ship.shipped).dt.days", "", 0.1),
            ("print(ship.groupby('carrier').days.median())", "carrier\nDHL 2.0\nUPS 3.0\nPostNord 4.0\n", 0.6),
        ],
        path_b: [
            ("import pandas as pd\nship = pd.read_parquet('shipments.parquet')", "", 0.1),
            ("ship['days'] = (ship.delivered - ship.shipped).days", "", -0.3),  # diverges here
            (
                "ship['days'] = (ship.delivered - ship.shipped).dt.days\nprint(ship.groupby('carrier').days.median())",
                "carrier\nDHL 2.0\nUPS 3.0\nPostNord 4.0\n",
                0.5,
            ),
        ],
    }
    for index, (path, plan) in enumerate(plans.items()):
        clock = Clock(datetime(2026, 2, 10, 14, 0 + index * 10, tzinfo=UTC))
        rec = recorder(path, clock, run_id=f"demo_delivery_{'ab'[index]}", task=task, model="gpt-4o")
        for n, (code, out, reward) in enumerate(plan, start=1):
            error = "AttributeError: 'Series' object has no attribute 'days'" if reward < 0 else ""
            action, observation = run_step(
                rec,
                clock,
                n,
                code=code,
                rationale=f"step {n} of the plan",
                output=out,
                error=error,
                reward=reward,
                tokens=1000 + 50 * n,
            )
            if n == 1:
                rec.record_variable_update("ship", "DataFrame(12004 rows × 6 columns)")
            end_step(rec, action, observation, reward, 1000 + 50 * n)
        rec.record_final("DHL 2 days, UPS 3 days, PostNord 4 days")
        rec.end_session()


def record_trajectory(path: Path) -> None:
    path.unlink(missing_ok=True)
    clock = Clock(datetime(2026, 2, 11, 8, 0, tzinfo=UTC))

    class ClockedLogger(TrajectoryLogger):
        # The logger stamps each event with time.time() when it is created; restamp it.
        def log_event(self, event) -> None:
            event.timestamp = clock.epoch()
            super().log_event(event)

    with ClockedLogger(path, run_id="demo_trajectory_logger", metadata={"env": "pure_rlm"}) as logger:
        logger.log_run_start(
            "Summarise the incident report INC-4711 in five bullet points", context_length=18230, model="gpt-4o-mini"
        )
        logger.log_context_load("text", 18230, preview="INC-4711: checkout latency spike on 2026-02-03 …")
        plan = [
            (
                "Split the report into sections first.",
                "sections = context.split('\\n## ')\nprint(len(sections))",
                "7\n",
            ),
            (
                "Ask a sub-LLM for each section's key point.",
                "points = [llm_query(f'Key point: {s[:2000]}') for s in sections]",
                "",
            ),
            (
                "Assemble the five bullets.",
                "print('\\n'.join('- ' + p for p in points[:5]))",
                "- Latency rose to 9 s at 14:02\n- Cause: cache stampede\n- …\n",
            ),
        ]
        for n, (reasoning, code, output) in enumerate(plan, start=1):
            logger.log_iteration_start(n)
            clock.advance(700)
            logger.log_llm_call(
                f"iteration {n}", f"```python\n{code}\n```", tokens_in=1500, tokens_out=60, duration_ms=700.0
            )
            logger.log_iteration(n, reasoning=reasoning, code=code, output=output, duration_ms=240.0, tokens_used=1560)
            if n == 2:
                for section in range(2):
                    logger.log_llm_call(
                        f"Key point of section {section}",
                        "cache stampede after deploy",
                        tokens_in=600,
                        tokens_out=12,
                        is_sub_llm=True,
                    )
        logger.log_final("Five bullets summarising INC-4711")
        logger.log_run_end(success=True, answer="Five bullets summarising INC-4711", total_tokens=6000)


def record_snapshot(path: Path) -> None:
    scratch = HERE / ".snapshot_source.jsonl"
    clock = Clock(datetime(2026, 2, 12, 16, 45, tzinfo=UTC))
    rec = recorder(
        scratch,
        clock,
        run_id="demo_snapshot",
        task="Estimate π with a Monte-Carlo simulation (10⁶ samples)",
        model="gpt-4o-mini",
    )
    for n, (code, out) in enumerate(
        [
            ("import random\nN = 1_000_000", ""),
            ("inside = sum(random.random()**2 + random.random()**2 <= 1 for _ in range(N))", ""),
            ("print(4 * inside / N)", "3.141876\n"),
        ],
        start=1,
    ):
        action, observation = run_step(
            rec, clock, n, code=code, rationale="Monte-Carlo", output=out, reward=0.3, tokens=800
        )
        rec.record_variable_update(
            "N" if n == 1 else "inside" if n == 2 else "pi", 1_000_000 if n == 1 else 785469 if n == 2 else 3.141876
        )
        end_step(rec, action, observation, 0.3, 800)
    rec.record_final("π ≈ 3.1419")
    snapshot = rec.end_session()
    scratch.unlink()
    path.write_text(json.dumps(snapshot.to_dict(), indent=2), encoding="utf-8")


def main() -> None:
    record_success(HERE / "rlm_success.jsonl")
    record_failure(HERE / "rlm_failing.jsonl")
    record_divergent_pair(HERE / "rlm_diverge_a.jsonl", HERE / "rlm_diverge_b.jsonl")
    record_trajectory(HERE / "rlm_trajectory_logger.jsonl")
    record_snapshot(HERE / "rlm_snapshot.json")
    for path in sorted(HERE.glob("rlm_*")):
        print(f"{path.name}: {sum(1 for _ in path.open())} lines")


if __name__ == "__main__":
    main()
