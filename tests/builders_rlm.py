"""Record real rlm-code files for the importer tests, with rlm-code's own writers.

Every file here is produced by the reference library (SessionRecorder, TrajectoryLogger,
LocalJSONLSink, SessionStore), so the tests compare our import with what rlm-code itself reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from rlm_code.rlm.observability import LocalJSONLSink
from rlm_code.rlm.session_replay import SessionRecorder, SessionStore
from rlm_code.rlm.trajectory import TrajectoryLogger

UNICODE_TASK = (
    "Résumé des données — 数据分析 🚀 with a task longer than one hundred characters, to check the summary cut"
)


def record_full_session(
    path: Path,
    *,
    run_id: str = "run_full",
    steps: int = 6,
    fail_at: frozenset[int] = frozenset({3}),
    large_output_at: int | None = 2,
    checkpoint_at: int | None = 2,
    end: bool = True,
    final: bool = True,
) -> SessionRecorder:
    """A session using every recorder method: steps with actions/results/ends, memory and
    variable updates, LLM calls, child spawns and results, errors, unicode, a large output,
    a checkpoint, the final answer and end_session."""
    recorder = SessionRecorder(
        session_id=f"session_{run_id}",
        run_id=run_id,
        task=UNICODE_TASK,
        environment="pure_rlm",
        model="gpt-4o-mini",
        output_path=path,
    )
    notes: list[str] = []
    for step in range(1, steps + 1):
        recorder.record_step_start(step)
        recorder.record_llm_request(f"Prompt for step {step}: café ☕ " + "x" * 600, model="gpt-4o-mini")
        recorder.record_llm_response(f"Réponse {step}", tokens_in=100 + step, tokens_out=20 + step, duration_ms=412.5)
        code = f"x_{step} = {step} * 2\nprint('ok {step} ✓')"
        action = {"action": "run_python", "code": code, "rationale": f"because {step}"}
        recorder.record_action(action, rationale=f"Step {step}: compute ✓")
        failed = step in fail_at
        if failed:
            observation = {"success": False, "stdout": "", "stderr": f"NameError: name 'y_{step}' is not defined"}
        elif large_output_at == step:
            observation = {"success": True, "output": "grand résultat " * 20_000}
        else:
            observation = {"success": True, "output": f"ok {step} ✓"}
        reward = -0.25 if failed else 0.5
        recorder.record_result(
            observation, reward=reward, success=not failed, duration_ms=10.0 * step, tokens_used=150 + step
        )
        recorder.record_variable_update(f"x_{step}", step * 2)
        recorder.record_variable_update("table", {"rows": list(range(step)), "name": "données"})
        if step % 2 == 0:
            notes = notes + [f"note {step}: ünïcödé"]
            recorder.record_memory_update(notes)
        if step == 3:
            recorder.record_child_spawn("child_001", "Analyse section 1 — 第一节", depth=1)
            recorder.record_child_result("child_001", success=True, result="Section 1 holds financial data")
            recorder.record_error("Timeout exceeded in sub-call", recoverable=True)
        if step == 4:
            recorder.record_child_spawn("child_002", "Analyse section 2", depth=1)
            recorder.record_child_result("child_002", success=False, result="failed")
        recorder.record_step_end(
            action, observation, reward=reward, success=not failed, duration_ms=10.0 * step, tokens_used=150 + step
        )
        if checkpoint_at == step:
            recorder.create_checkpoint("before_refactor")
    if final:
        recorder.record_final("The answer is 42 — 答案", completed=True)
    if end:
        recorder.end_session()
    return recorder


def record_failing_session(path: Path, *, run_id: str = "run_failing") -> SessionRecorder:
    recorder = SessionRecorder(
        session_id=f"session_{run_id}", run_id=run_id, task="Parse the CSV", environment="generic",
        model="claude-3-5-sonnet", output_path=path,
    )  # fmt: skip
    for step in range(1, 4):
        recorder.record_step_start(step)
        action = {"action": "run_python", "code": f"pd.read_csv('missing_{step}.csv')"}
        recorder.record_action(action, rationale="load the data")
        observation = {"success": False, "stderr": f"FileNotFoundError: missing_{step}.csv"}
        recorder.record_result(observation, reward=-0.5, success=False, duration_ms=5.0, tokens_used=90)
        recorder.record_error(f"FileNotFoundError at step {step}", recoverable=step < 3)
        recorder.record_step_end(action, observation, reward=-0.5, success=False, duration_ms=5.0, tokens_used=90)
    recorder.end_session()
    return recorder


def write_steps_only_session(path: Path, *, run_id: str = "run_ends_only") -> None:
    """A file whose steps are only step_end lines (no step_start/action/result): rlm-code
    ignores step_end's own action/output/error; we use them."""
    recorder = SessionRecorder(session_id="s", run_id=run_id, task="ends only", environment="generic", output_path=path)
    recorder.record_variable_update("a", 1)
    recorder._current_step = 1
    recorder.record_step_end(
        {"action": "run_python", "code": "a = 1"}, {"output": "done", "error": ""},
        reward=1.0, success=True, duration_ms=7.0, tokens_used=33,
    )  # fmt: skip
    recorder._current_step = 2
    recorder.record_step_end(
        {"action": "submit", "code": ""}, {"stdout": "", "stderr": "boom"},
        reward=0.0, success=False, duration_ms=3.0, tokens_used=11,
    )  # fmt: skip
    recorder.end_session()


def write_trajectory_logger_session(path: Path, *, run_id: str = "traj_logger") -> None:
    """What rlm-code's own TrajectoryLogger writes (float timestamps, data.code/output, no
    iteration_end)."""
    with TrajectoryLogger(path, run_id=run_id, metadata={"env": "pure_rlm"}) as logger:
        logger.log_run_start("Summarise the report — résumé", context_length=1200, model="gpt-4o")
        logger.log_context_load("text", 1200, preview="Report text …")
        for iteration in range(1, 4):
            logger.log_iteration_start(iteration)
            logger.log_llm_call(
                f"prompt {iteration}", f"response {iteration}", tokens_in=50, tokens_out=10, duration_ms=300.0
            )
            logger.log_iteration(
                iteration,
                reasoning=f"think {iteration}",
                code=f"print({iteration})",
                output=f"{iteration}\n",
                duration_ms=12.0,
                tokens_used=60 + iteration,
            )
            if iteration == 2:
                logger.log_llm_call("sub prompt", "sub response", tokens_in=5, tokens_out=2, is_sub_llm=True)
                logger.log_child_spawn("child_a", "sub task", depth=1)
                logger.log_child_result("child_a", "sub result", success=True)
                logger.log_error("ValueError: bad value", traceback="Traceback ...")
        logger.log_final("Report summarised")
        logger.log_run_end(success=True, answer="Report summarised", total_tokens=500)


def write_documented_trajectory(path: Path, *, run_id: str = "traj_doc") -> None:
    """The legacy trajectory dialect rlm-code's docs describe (iteration, data.action,
    data.observation, iteration_end), written line by line as rlm-code would read it."""
    lines = [
        {
            "event_type": "run_start",
            "timestamp": "2026-02-08T10:00:00+00:00",
            "run_id": run_id,
            "data": {"task": "Legacy task", "environment": "generic", "model": "gpt-4"},
        },
    ]
    cumulative = 0.0
    for i in range(1, 4):
        ts = f"2026-02-08T10:00:0{i}+00:00"
        failed = i == 2
        reward = 0.0 if failed else 1.0
        cumulative += reward
        obs = {"success": not failed, "output": f"out {i}", "error": "oops" if failed else ""}
        lines += [
            {"event_type": "iteration_start", "iteration": i, "timestamp": ts, "run_id": run_id, "data": {}},
            {
                "event_type": "llm_request",
                "iteration": i,
                "step": i,
                "timestamp": ts,
                "run_id": run_id,
                "data": {"prompt_preview": "p", "model": "gpt-4"},
            },
            {
                "event_type": "llm_response",
                "iteration": i,
                "step": i,
                "timestamp": ts,
                "run_id": run_id,
                "data": {"response_preview": "r", "tokens_in": 5, "tokens_out": 6},
            },
            {
                "event_type": "iteration_code",
                "iteration": i,
                "timestamp": ts,
                "run_id": run_id,
                "data": {"action": {"action": "run_python", "code": f"print({i})"}, "rationale": f"why {i}"},
            },
            {
                "event_type": "iteration_output",
                "iteration": i,
                "timestamp": ts,
                "run_id": run_id,
                "duration_ms": 4.0,
                "data": {
                    "observation": obs,
                    "success": not failed,
                    "reward": reward,
                    "cumulative_reward": cumulative,
                    "tokens_used": 40 + i,
                },
            },
            {
                "event_type": "iteration_end",
                "iteration": i,
                "timestamp": ts,
                "run_id": run_id,
                "data": {"reward": reward, "success": not failed, "tokens_used": 40 + i},
            },
        ]
    lines.append(
        {
            "event_type": "sub_llm_request",
            "iteration": 3,
            "timestamp": "2026-02-08T10:00:05+00:00",
            "run_id": run_id,
            "data": {"prompt": "sub"},
        }
    )
    lines.append(
        {
            "event_type": "final_detected",
            "iteration": 3,
            "step": 3,
            "timestamp": "2026-02-08T10:00:06+00:00",
            "run_id": run_id,
            "data": {"answer": "done", "completed": True},
        }
    )
    lines.append(
        {
            "event_type": "run_end",
            "iteration": 3,
            "timestamp": "2026-02-08T10:00:09+00:00",
            "run_id": run_id,
            "data": {"completed": True, "total_reward": 2.0},
        }
    )
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def write_runner_steps(path: Path, *, run_id: str = "runner_1", with_context: bool = True) -> None:
    """rlm-code runner's legacy step JSONL (FORMATS.md 1c)."""
    lines = []
    if with_context:
        lines.append({"type": "context", "run_id": run_id, "context": "document text", "length": 13})
    for i in range(1, 5):
        obs = {"stdout": f"out {i}", "stderr": "Traceback: boom" if i == 3 else ""}
        if i == 4:
            obs = {"success": True, "output": "final out"}
        lines.append({
            "type": "step", "run_id": run_id, "environment": "pure_rlm", "framework": "rlm",
            "task": "Runner task ✓", "timestamp": f"2026-02-08T11:00:0{i}+00:00", "step": i,
            "action": {"action": "run_python", "code": f"step_{i}()", "reasoning": f"reason {i}"},
            "observation": obs, "reward": 0.5 if i != 3 else -0.5,
            "usage": {"prompt_tokens": 100 * i, "completion_tokens": 10 * i, "total_calls": 1},
            "depth": 0, "parent_run_id": None,
        })  # fmt: skip
    lines.append(
        {
            "type": "final",
            "run_id": run_id,
            "completed": True,
            "steps": 4,
            "total_reward": 1.0,
            "final_response": "runner answer",
            "usage": {"prompt_tokens": 1000, "completion_tokens": 100},
            "timestamp": "2026-02-08T11:00:09+00:00",
        }
    )
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def write_sink_folder(base: Path, *, runs: tuple[str, ...] = ("sink_a", "sink_b")) -> LocalJSONLSink:
    sink = LocalJSONLSink(base_dir=base)
    for n, run_id in enumerate(runs):
        sink.on_run_start(run_id, task=f"Sink task {run_id}", environment="generic", params={"model": "gpt-4o"})
        cumulative = 0.0
        for step in range(1, 4 + n):
            reward = 0.5 if step != 2 else -0.5
            cumulative += reward
            event = {
                "step": step,
                "action": {"action": "run_python"},
                "reward": reward,
                "observation": {"success": step != 2},
            }
            sink.on_step(run_id, event=event, cumulative_reward=cumulative)
        result = SimpleNamespace(
            completed=n == 0,
            steps=3 + n,
            total_reward=cumulative,
            finished_at="2026-02-08T12:00:00+00:00",
            task=f"Sink task {run_id}",
            environment="generic",
        )
        sink.on_run_end(run_id, result=result, run_path=base / f"{run_id}.jsonl")
    return sink


def write_store_folder(base: Path, recorder: SessionRecorder) -> SessionStore:
    store = SessionStore(base_dir=base)
    store.save_snapshot(recorder.get_snapshot())
    store.save_checkpoint(recorder.get_snapshot(), name="midway")
    return store
