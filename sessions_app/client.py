"""RemoteRecorder: record an agent session straight into a Replay server while the agent runs.

Its methods mirror rlm-code's `SessionRecorder` (rlm_code.rlm.session_replay) and produce the
same native records (`{"event_type", "timestamp", "step", "data", "run_id", "duration_ms"}`),
so an agent swaps one recorder for the other:

    recorder = RemoteRecorder("https://replay.example.com", api_key, task="...", environment="repl")
    recorder.record_step_start(1)
    recorder.record_action({"action": "run_python", "code": "x = 1"})
    ...
    recorder.end_session()

Records are buffered and sent in batches (every `batch_size` records or `flush_interval`
seconds, from a background thread) to POST /api/sessions/{id}/events. Each batch gets an
idempotency key when it is cut and keeps it through every retry, so a batch whose response was
lost is stored once; batches are sent strictly in order. Failures are retried with exponential
backoff; a batch that still fails stays queued (nothing is dropped) and `flush()` raises
RemoteRecorderError. With `output_path` every record is also appended to a local JSONL file in
rlm-code's own format, which Replay can import later.

Only the standard library is used, so the module can be copied into an agent's environment.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# HTTP statuses worth retrying: the server is busy, restarting or timed out.
RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class RemoteRecorderError(Exception):
    """A request failed for good (after its retries, or refused outright: 4xx)."""

    def __init__(self, message: str, *, status: int | None = None, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


def _utc_now() -> str:
    return datetime.now(UTC).isoformat()


def _json_default(value: Any) -> Any:
    # rlm-code's recorder drops a whole record whose data is not JSON-serialisable (it logs a
    # warning); we keep the record and store such values as their repr.
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_json_default)


class RemoteRecorder:
    """Records a session like rlm-code's SessionRecorder, into a Replay server."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        session_id: int | None = None,
        task: str = "",
        environment: str = "",
        model: str = "",
        run_id: str = "",
        *,
        project: str = "",
        metadata: dict[str, Any] | None = None,
        batch_size: int = 500,
        flush_interval: float = 1.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        timeout: float = 30.0,
        output_path: Path | str | None = None,
        background: bool = True,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 1 <= batch_size <= 5000:
            raise ValueError("batch_size must be between 1 and 5000 (the server's batch limit)")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.session_id = session_id
        self.run_id = run_id
        self.task = task
        self.environment = environment
        self.model = model
        self.project = project
        self.metadata = dict(metadata or {})
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout = timeout
        self.output_path = Path(output_path) if output_path else None
        self.last_error: Exception | None = None
        self._sleep = sleep

        # What SessionRecorder keeps, so step_end carries the same full StepState.
        self._steps: list[dict[str, Any]] = []
        self._memory_notes: list[str] = []
        self._variables: dict[str, Any] = {}
        self._current_step = 0
        self._cumulative_reward = 0.0
        self._total_tokens = 0
        self._started_at = _utc_now()
        self._completed = False
        self._final_answer = ""

        # Sending: records wait in `_buffer` until cut into a keyed batch in `_batches`.
        self._client_id = uuid.uuid4().hex
        self._batch_number = 0
        self._buffer: list[dict[str, Any]] = []
        self._batches: deque[tuple[str, list[dict[str, Any]]]] = deque()
        self._lock = threading.Lock()  # guards _buffer and _batches
        self._send_lock = threading.Lock()  # one sender at a time keeps batches in order
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="replay-recorder", daemon=True)
            self._thread.start()

        self._record_event("session_start", {"task": task, "environment": environment, "model": model})

    # --- SessionRecorder's methods ---------------------------------------------------------------

    def record_step_start(self, step: int) -> None:
        self._current_step = step
        self._record_event("step_start", {"step": step})

    def record_action(self, action: dict[str, Any], rationale: str = "") -> None:
        self._record_event("step_action", {"action": action, "rationale": rationale})

    def record_result(
        self,
        observation: dict[str, Any],
        reward: float,
        success: bool,
        duration_ms: float = 0.0,
        tokens_used: int = 0,
    ) -> None:
        self._cumulative_reward += reward
        self._total_tokens += tokens_used
        self._record_event(
            "step_result",
            {
                "observation": observation,
                "reward": reward,
                "cumulative_reward": self._cumulative_reward,
                "success": success,
                "tokens_used": tokens_used,
            },
            duration_ms=duration_ms,
        )

    def record_step_end(
        self,
        action: dict[str, Any],
        observation: dict[str, Any],
        reward: float,
        success: bool,
        duration_ms: float = 0.0,
        tokens_used: int = 0,
    ) -> None:
        step_state = {
            "step": self._current_step,
            "timestamp": _utc_now(),
            "action_type": action.get("action", ""),
            "action_code": action.get("code", ""),
            "action_rationale": action.get("rationale", ""),
            "success": success,
            "output": observation.get("output", observation.get("stdout", "")),
            "error": observation.get("error", observation.get("stderr", "")),
            "reward": reward,
            "cumulative_reward": self._cumulative_reward,
            "duration_ms": duration_ms,
            "tokens_used": tokens_used,
            "memory_notes": list(self._memory_notes),
            "variables": dict(self._variables),
            "raw_action": action,
            "raw_observation": observation,
        }
        self._steps.append(step_state)
        self._record_event("step_end", step_state)

    def record_memory_update(self, notes: list[str]) -> None:
        self._memory_notes = list(notes)
        self._record_event("memory_update", {"notes": notes})

    def record_variable_update(self, name: str, value: Any) -> None:
        self._variables[name] = value
        self._record_event(
            "variable_update",
            {"name": name, "type": type(value).__name__, "preview": str(value)[:200]},
        )

    def record_llm_request(self, prompt: str, model: str = "") -> None:
        self._record_event(
            "llm_request",
            {"prompt_preview": prompt[:500], "prompt_length": len(prompt), "model": model},
        )

    def record_llm_response(
        self, response: str, tokens_in: int = 0, tokens_out: int = 0, duration_ms: float = 0.0
    ) -> None:
        self._record_event(
            "llm_response",
            {
                "response_preview": response[:500],
                "response_length": len(response),
                "tokens_in": tokens_in,
                "tokens_out": tokens_out,
            },
            duration_ms=duration_ms,
        )

    def record_child_spawn(self, child_id: str, task: str, depth: int) -> None:
        self._record_event("child_spawn", {"child_id": child_id, "task": task[:200], "depth": depth})

    def record_child_result(self, child_id: str, success: bool, result: str = "") -> None:
        self._record_event(
            "child_result",
            {"child_id": child_id, "success": success, "result_preview": result[:200]},
        )

    def record_final(self, answer: str, completed: bool = True) -> None:
        self._completed = completed
        self._final_answer = answer
        self._record_event("final_detected", {"answer": answer, "completed": completed})

    def record_error(self, error: str, recoverable: bool = True) -> None:
        self._record_event("error", {"error": error, "recoverable": recoverable})

    def create_checkpoint(self, name: str = "") -> dict[str, Any]:
        """Record a checkpoint; returns the snapshot as SessionSnapshot.to_dict() shapes it."""
        checkpoint_name = name or f"checkpoint_{self._current_step}"
        snapshot = self.get_snapshot()
        snapshot["metadata"]["checkpoint_name"] = checkpoint_name
        self._record_event("checkpoint", {"checkpoint_name": checkpoint_name, "step": self._current_step})
        return snapshot

    def end_session(self, status: str | None = None) -> dict[str, Any]:
        """Record session_end, send everything, and close the session on the server.

        The server status is `completed` when a final answer was recorded, else `failed`,
        unless `status` says otherwise. Raises RemoteRecorderError if the server cannot be
        reached after the retries; the records stay queued and a later call sends them."""
        self._record_event(
            "session_end",
            {
                "completed": self._completed,
                "total_steps": len(self._steps),
                "total_reward": self._cumulative_reward,
                "total_tokens": self._total_tokens,
            },
        )
        self.flush()
        # After the flush: a session whose records all waited for it is created by it, and its
        # snapshot named no session ("session_id": "").
        snapshot = self.get_snapshot()
        self._send_with_retries(
            "POST",
            f"/api/sessions/{self.session_id}/end",
            {
                "status": status or ("completed" if self._completed else "failed"),
                "final_answer": self._final_answer,
            },
        )
        self._stop_thread()
        return snapshot

    def get_snapshot(self) -> dict[str, Any]:
        finished_at = _utc_now()
        try:
            started = datetime.fromisoformat(self._started_at)
            duration = (datetime.fromisoformat(finished_at) - started).total_seconds()
        except ValueError:
            duration = 0.0
        snapshot_id = hashlib.md5(f"{self.session_id}:{self._current_step}:{finished_at}".encode()).hexdigest()[:12]
        return {
            "snapshot_id": snapshot_id,
            "session_id": str(self.session_id or ""),
            "run_id": self.run_id,
            "created_at": finished_at,
            "step": self._current_step,
            "total_steps": len(self._steps),
            "task": self.task,
            "environment": self.environment,
            "model": self.model,
            "completed": self._completed,
            "final_answer": self._final_answer,
            "total_reward": self._cumulative_reward,
            "total_tokens": self._total_tokens,
            "duration_seconds": duration,
            "steps": [dict(step) for step in self._steps],
            "memory_notes": list(self._memory_notes),
            "variables": dict(self._variables),
            "metadata": {},
        }

    # --- buffering and sending -------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Records recorded but not yet acknowledged by the server."""
        with self._lock:
            return len(self._buffer) + sum(len(records) for _, records in self._batches)

    def flush(self) -> None:
        """Send every queued record now; raises RemoteRecorderError if a batch cannot be sent
        (it stays queued, in order, for the next flush)."""
        with self._send_lock:
            self._cut_batch()
            if self.session_id is None:
                self._create_session()
            while True:
                with self._lock:
                    if not self._batches:
                        return
                    key, records = self._batches[0]
                self._send_with_retries(
                    "POST",
                    f"/api/sessions/{self.session_id}/events",
                    {"events": records, "format": "rlm_native", "idempotency_key": key},
                )
                with self._lock:
                    self._batches.popleft()

    def close(self) -> None:
        """Send what is queued and stop the background thread, without ending the session."""
        try:
            self.flush()
        finally:
            self._stop_thread()

    def __enter__(self) -> RemoteRecorder:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _record_event(self, event_type: str, data: dict[str, Any], duration_ms: float | None = None) -> dict[str, Any]:
        event: dict[str, Any] = {
            "event_type": event_type,
            "timestamp": _utc_now(),
            "step": self._current_step,
            "data": data,
        }
        if self.run_id:
            event["run_id"] = self.run_id
        if duration_ms is not None:
            event["duration_ms"] = duration_ms
        # Serialise now: later changes to the caller's dicts must not change what was recorded.
        text = _dumps(event)
        record = json.loads(text)
        if self.output_path is not None:
            self._write_local(text)
        with self._lock:
            self._buffer.append(record)
            full = len(self._buffer) >= self.batch_size
        if full:
            if self._thread is not None:
                self._wake.set()
            else:
                self._flush_quietly()
        return record

    def _flush_quietly(self) -> None:
        # Like SessionRecorder's file writes, recording never raises into the agent: a failed
        # send is logged and its records stay queued for the next flush.
        try:
            self.flush()
        except RemoteRecorderError as exc:
            logger.warning("Replay recorder: %s (%s records queued)", exc, self.pending)

    def _write_local(self, text: str) -> None:
        try:
            self.output_path.parent.mkdir(parents=True, exist_ok=True)
            with self.output_path.open("a", encoding="utf-8") as out:
                out.write(text + "\n")
        except OSError as exc:
            logger.warning("could not write %s: %s", self.output_path, exc)

    def _cut_batch(self) -> None:
        with self._lock:
            while self._buffer:
                records, self._buffer = self._buffer[: self.batch_size], self._buffer[self.batch_size :]
                self._batch_number += 1
                self._batches.append((f"{self._client_id}-{self._batch_number}", records))

    def _create_session(self) -> None:
        body = {
            "project": self.project,
            "format": "rlm_native",
            "run_id": self.run_id,
            "task": self.task,
            "environment": self.environment,
            "model": self.model,
            "metadata": self.metadata,
            # The same key on every retry: a create whose response was lost is not repeated.
            "idempotency_key": f"{self._client_id}-session",
        }
        created = self._send_with_retries("POST", "/api/sessions", body)
        self.session_id = created["id"]

    def _send_with_retries(self, method: str, path: str, body: dict[str, Any]) -> Any:
        data = json.dumps(body, default=_json_default).encode("utf-8")
        attempt = 0
        while True:
            try:
                result = self._request(method, path, data)
                self.last_error = None
                return result
            except _Retryable as exc:
                self.last_error = exc.error
                if attempt >= self.max_retries:
                    raise RemoteRecorderError(
                        f"{method} {path} failed after {attempt + 1} attempts: {exc.error}",
                        status=exc.status,
                    ) from exc.error
                delay = min(self.max_backoff, self.backoff * 2**attempt)
                self._sleep(delay * (0.5 + random.random() / 2))  # jitter spreads retries
                attempt += 1

    def _request(self, method: str, path: str, data: bytes) -> Any:
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.api_key}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            if exc.code in RETRYABLE_STATUSES:
                raise _Retryable(exc, exc.code) from None
            raise RemoteRecorderError(
                f"{method} {path} refused: HTTP {exc.code}: {detail}", status=exc.code, detail=detail
            ) from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            raise _Retryable(exc, None) from None

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            if self._stopping.is_set():
                return
            with self._lock:
                idle = not self._buffer and not self._batches
            if idle:
                continue
            try:
                self._flush_quietly()  # what fails stays queued for the next round
            except Exception:  # never let the agent's process lose its recorder thread silently
                logger.exception("Replay recorder: unexpected error while sending")

    def _stop_thread(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.timeout + 5)


class _Retryable(Exception):
    def __init__(self, error: Exception, status: int | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.status = status


def _error_detail(exc: urllib.error.HTTPError) -> Any:
    try:
        body = json.loads(exc.read() or b"null")
    except (ValueError, OSError):
        return exc.reason
    if isinstance(body, dict) and "detail" in body:
        return body["detail"]
    return body


__all__ = ["RemoteRecorder", "RemoteRecorderError"]
