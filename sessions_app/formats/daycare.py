"""daycare agent histories (ex3ndr/daycare; docs/formats.md, "daycare").

One record a line (or the `{"records": [...]}` body of daycare's history API): `{type, at (epoch
ms), ...}`. One file is one agent history, so one session, named after the file.

Mapping (docs/formats.md "daycare"):
- `start` -> session_start; `user_message` -> user_message; `note`, `reset` and
  `assistant_rewrite` -> note.
- `assistant_message` -> agent_message, in any of its three shapes: the oldest `{text}` with
  `<run_python>` blocks, `{text, toolCalls}`, and the newest `{content: [text | thinking |
  toolCall]}`. Tokens are `tokens.size.total` (else input + output), the model `tokens.model`;
  histories hold no prices, so tokens mark the event cost_unpriced. Each native tool call of
  the message also becomes a derived `tool_call` event (empty raw) that the outer `tool_result`
  answers by its id.
- Each run_python block is one step: `rlm_start` (step_start) ... `rlm_complete` (step_end,
  carrying the StepState: code, output, print output, error, duration). Inner calls
  `rlm_tool_call` / `rlm_tool_result` become tool_call / tool_response (tool_error when
  `toolIsError`), paired by the block's toolCallId and the call's count.

Recovery: when the history ends mid-block, the phase a restart would resume is computed exactly
as daycare's `agentLoopPendingPhaseResolve` does and recorded in the session's metadata
(`pending_phase` vm_start | tool_call | error, `pending_tool_call_id`, ...). An interrupted block
(tool_call or error phase) also closes a (failed) step on its last event, so step navigation
shows where it stopped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..canonical import CanonicalEvent, Kind, ParsedSession, Problems, SessionMeta
from . import Head, Source
from .fields import amount, clip, json_kind, number, parse_epoch_ms, record_kind, text
from .records import iter_records
from .step_state import STEP_TEXT_LIMIT, unrewarded_step_state

NAME = "daycare"
BODY_KEYS = ("records",)
RUN_PYTHON = "run_python"

KINDS: dict[str, str] = {
    "start": Kind.SESSION_START,
    "reset": Kind.NOTE,
    "user_message": Kind.USER_MESSAGE,
    "assistant_message": Kind.AGENT_MESSAGE,
    "tool_result": Kind.TOOL_RESPONSE,
    "rlm_start": Kind.STEP_START,
    "rlm_tool_call": Kind.TOOL_CALL,
    "rlm_tool_result": Kind.TOOL_RESPONSE,
    "rlm_complete": Kind.STEP_END,
    "assistant_rewrite": Kind.NOTE,
    "note": Kind.NOTE,
}
# Record types that only daycare writes: enough to recognise a history by content.
_DISTINCT = frozenset(KINDS) - {"start", "reset", "note"}

# What daycare's restart does in each phase (seed 001, "Startup Recovery Behavior").
RESUME_MESSAGE = {
    "vm_start": "a restart re-runs the pending run_python block(s) from VM start",
    "tool_call": "a restart resumes the latest snapshot with the error 'Process was restarted'",
    "error": "a restart completes the block with isError=true: 'Process was restarted before any tool call'",
}
# Messages with run_python calls remembered to find a block's message by its code.
RECENT_MESSAGES = 50
# Events held back after the latest event of an open block (see _History.events).
HOLD_LIMIT = 1000

# daycare's tagExtractAll: non-overlapping <run_python ...>...</run_python> pairs, content trimmed.
_RUN_PYTHON_OPEN = re.compile(r"<run_python(\s[^>]*)?>", re.IGNORECASE)
_RUN_PYTHON_CLOSE = re.compile(r"</run_python\s*>", re.IGNORECASE)
_TYPE_IN_TEXT = re.compile(
    rb'"type"\s*:\s*"(rlm_start|rlm_tool_call|rlm_tool_result|rlm_complete|assistant_message'
    rb'|user_message|tool_result|assistant_rewrite)"'
)
_AT_IN_TEXT = re.compile(rb'"at"\s*:\s*\d')


def sniff(head: Head) -> bool:
    typed = [r for r in head.records[:20] if isinstance(r.get("type"), str)]
    if typed:
        ours = [r for r in typed if r["type"] in KINDS and "at" in r]
        return any(r["type"] in _DISTINCT for r in ours) and len(ours) * 2 >= len(typed)
    for record in head.records[:5]:
        records = record.get("records")
        if isinstance(records, list) and records and isinstance(records[0], dict):
            return records[0].get("type") in KINDS and "at" in records[0]
    if head.text.lstrip()[:1] not in (b"[", b"{"):
        return False
    return bool(_TYPE_IN_TEXT.search(head.text) and _AT_IN_TEXT.search(head.text))


def parse(source: Source, problems: Problems) -> Iterator[ParsedSession]:
    meta = SessionMeta(source_session_id=_stem(source.display_name or source.path.name))
    history = _History(meta, problems)
    yield ParsedSession(meta=meta, events=history.events(source))


def _stem(name: str) -> str:
    base = Path(name).name
    if base.lower().endswith(".gz"):
        base = base[:-3]
    for suffix in (".jsonl", ".ndjson", ".json"):
        if base.lower().endswith(suffix) and len(base) > len(suffix):
            return base[: -len(suffix)]
    return base


def extract_run_python(text_value: str) -> list[str]:
    """The code of every complete <run_python> block of an (older) assistant text."""
    blocks: list[str] = []
    cursor = 0
    # A tag can only close at or before the last ">": searching no further keeps the open
    # pattern's attribute scan from rerunning to the end at every "<run_python " that has no
    # ">" after it, which made a text of many unclosed tags take quadratic time.
    end = text_value.rfind(">") + 1
    while cursor < end:
        opened = _RUN_PYTHON_OPEN.search(text_value, cursor, end)
        if opened is None:
            break
        closed = _RUN_PYTHON_CLOSE.search(text_value, opened.end())
        if closed is None:
            break
        blocks.append(text_value[opened.end() : closed.start()].strip())
        cursor = closed.end()
    return blocks


class _History:
    """Walks one history, keeping just what pairing, steps and the recovery phase need."""

    def __init__(self, meta: SessionMeta, problems: Problems) -> None:
        self.meta = meta
        self.problems = problems
        self.step = 0
        # Events produced so far, and the position (seq on import) of the record's first event.
        self.produced = 0
        self.position = 0
        self.blocks: dict[str, dict[str, Any]] = {}  # open run_python blocks by toolCallId
        self.starts: dict[str, dict[str, Any]] = {}  # rlm_start of blocks with no rlm_complete
        self.completed: set[str] = set()
        self.latest_call: dict[str, dict[str, Any]] = {}  # latest rlm_tool_call per open block
        self.max_start_at: float | None = None
        self.assistant: dict[str, Any] | None = None  # latest assistant message with run_python
        self.outer_calls: dict[str, str] = {}  # outer tool call id -> tool name
        self.unassigned_tokens = 0  # tokens of the message whose first block has not started
        # Assistant messages by their `at` (what an assistant_rewrite names) and the latest one.
        self.assistant_by_at: dict[float, dict[str, Any]] = {}
        self.last_assistant: dict[str, Any] | None = None
        # Messages with run_python calls, by call id and the latest few: the message a block
        # belongs to, found as daycare's assistantRunPythonForStart finds it.
        self.run_python_by_id: dict[str, dict[str, Any]] = {}
        self.run_python_recent: list[dict[str, Any]] = []
        # rlm_tool_result records carrying a deferredPayload, per block not completed.
        self.deferred: dict[str, int] = {}

    def events(self, source: Source) -> Iterator[CanonicalEvent]:
        # The latest event of a block still open is held back, with whatever follows it (up to
        # HOLD_LIMIT events), so that if the history ends before the block completes, that
        # event can still close the block's (failed) step.
        held: list[CanonicalEvent] = []
        for record in iter_records(source, self.problems, body_keys=BODY_KEYS, on_bytes=source.on_bytes):
            for event in self.convert(record.value, record.text, record.line):
                if event.step is not None and event.step_state is None and event.step in self.open_steps():
                    yield from held
                    held = [event]
                elif held:
                    held.append(event)
                    if len(held) > HOLD_LIMIT:
                        yield from held
                        held = []
                else:
                    yield event
        self.finish(held[0] if held else None)
        yield from held

    def open_steps(self) -> set[int]:
        return {block["step"] for block in self.blocks.values()}

    def convert(self, record: dict[str, Any], raw: str, line: int) -> list[CanonicalEvent]:
        problems = self.problems
        record_type, kind = record_kind(record, "type", KINDS, line, problems)
        at = record.get("at")
        timestamp = parse_epoch_ms(at, "at", line, problems) if "at" in record else None
        if "at" not in record:
            problems.add(line, "at", "missing at (epoch milliseconds)")
        at_ms = at if timestamp is not None else None
        if timestamp is not None and self.meta.started_at is None:
            self.meta.started_at = timestamp
        if timestamp is not None:
            self.meta.ended_at = timestamp

        payload = {key: value for key, value in record.items() if key not in ("type", "at")}
        event = CanonicalEvent(
            kind=kind, source_type=record_type or "missing", raw=raw, payload=payload,
            timestamp=timestamp, line=line,
        )  # fmt: skip
        self.position = self.produced
        handler = _HANDLERS.get(record_type)
        extra = handler(self, event, record, at_ms, line) if handler is not None else None
        events = [event, *extra] if extra else [event]
        self.produced += len(events)
        return events

    # Per record type ----------------------------------------------------------------------

    def _user_message(
        self, event: CanonicalEvent, record: dict[str, Any], at_ms: float | None, line: int
    ) -> list[CanonicalEvent] | None:
        message = self._text_field(record, "text", line)
        if message and not self.meta.task:
            self.meta.task = clip(message, 500)

    def _assistant_message(
        self, event: CanonicalEvent, record: dict[str, Any], at_ms: float | None, line: int
    ) -> list[CanonicalEvent] | None:
        problems = self.problems
        text_parts: list[str] = []
        calls: list[dict[str, Any]] = []
        if "content" in record:
            content = record["content"]
            if not isinstance(content, list):
                problems.add(line, "content", f"content is {json_kind(content)}, not a list")
                content = []
            for index, block in enumerate(content):
                if not isinstance(block, dict):
                    problems.add(line, f"content[{index}]", "content block is not an object")
                    continue
                block_type = block.get("type")
                if block_type == "text":
                    text_parts.append(text(block.get("text")))
                elif block_type == "toolCall":
                    calls.append(self._tool_call_block(block, f"content[{index}]", line))
        else:
            text_parts.append(self._text_field(record, "text", line))
            tool_calls = record.get("toolCalls")
            if tool_calls is not None:
                if not isinstance(tool_calls, list):
                    problems.add(line, "toolCalls", "toolCalls is not a list")
                else:
                    for index, block in enumerate(tool_calls):
                        if isinstance(block, dict):
                            calls.append(self._tool_call_block(block, f"toolCalls[{index}]", line))
                        else:
                            problems.add(line, f"toolCalls[{index}]", "tool call is not an object")
        # As daycare's messageContentExtractText: the non-empty text blocks, a line apart.
        message = "\n".join(part for part in text_parts if part)
        event.payload["text"] = message

        # run_python blocks: native calls, else the <run_python> tags of the older text shape.
        blocks = [(call["id"], call["code"], call["description"]) for call in calls
                  if call["name"] == RUN_PYTHON and call["code"].strip()]  # fmt: skip
        if not calls:
            blocks = [("", code, "") for code in extract_run_python(message) if code]
        has_text = bool(text_parts) if "content" in record else "text" in record
        info = {
            "at": at_ms, "line": line, "index": self.position, "has_text": has_text, "text": message,
            "ids": [b[0] for b in blocks], "codes": [b[1] for b in blocks], "descriptions": [b[2] for b in blocks],
        }  # fmt: skip
        if at_ms is not None:
            self.assistant_by_at[at_ms] = info
        self.last_assistant = info
        if blocks:
            event.payload["run_python_blocks"] = len(blocks)
            self.assistant = info
            for call_id in info["ids"]:
                if call_id:
                    self.run_python_by_id[call_id] = info
            self.run_python_recent = [*self.run_python_recent[-(RECENT_MESSAGES - 1) :], info]

        tokens = record.get("tokens")
        used = None
        if isinstance(tokens, dict):
            model = tokens.get("model")
            if isinstance(model, str) and model:
                event.payload["model"] = model
                if not self.meta.model:
                    self.meta.model = model
            size = tokens.get("size")
            if isinstance(size, dict):
                total = amount(size, "total", "tokens.size.total", line, problems)
                if total is None and "total" not in size:
                    parts = [amount(size, k, f"tokens.size.{k}", line, problems) for k in ("input", "output")]
                    total = sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
                used = int(total) if total is not None else None
            elif size is not None:
                problems.add(line, "tokens.size", "tokens.size is not an object")
        elif tokens is not None:
            problems.add(line, "tokens", "tokens is not an object")
        event.tokens = used
        event.cost_unpriced = bool(used)
        self.unassigned_tokens = (used or 0) if blocks else 0

        derived = []
        for call in calls:
            if not call["id"]:
                continue
            self.outer_calls[call["id"]] = call["name"]
            derived.append(
                CanonicalEvent(
                    kind=Kind.TOOL_CALL,
                    source_type="assistant_message.toolCall",
                    raw=event.raw,
                    payload={
                        "id": call["id"],
                        "name": call["name"],
                        "arguments": call["arguments"],
                        "derived_from_line": line,
                    },
                    timestamp=event.timestamp,
                    line=line,
                    tool=call["name"],
                    pair_id=call["id"],
                )  # fmt: skip
            )
        return derived

    def _tool_call_block(self, block: dict[str, Any], field: str, line: int) -> dict[str, Any]:
        call_id = block.get("id")
        name = block.get("name")
        arguments = block.get("arguments")
        if not isinstance(call_id, str) or not call_id:
            self.problems.add(line, f"{field}.id", "tool call without id: it cannot be paired")
            call_id = ""
        if not isinstance(name, str):
            self.problems.add(line, f"{field}.name", "tool call without a name")
            name = ""
        code = description = ""
        if isinstance(arguments, dict):
            code = arguments.get("code") if isinstance(arguments.get("code"), str) else ""
            description = arguments.get("description") if isinstance(arguments.get("description"), str) else ""
        elif arguments is not None:
            self.problems.add(line, f"{field}.arguments", "tool call arguments are not an object")
        if name == RUN_PYTHON and not code:
            self.problems.add(line, f"{field}.arguments.code", "run_python call without code")
        return {"id": call_id, "name": name, "arguments": arguments, "code": code, "description": description}

    def _tool_result(
        self, event: CanonicalEvent, record: dict[str, Any], at_ms: float | None, line: int
    ) -> list[CanonicalEvent] | None:
        call_id = self._text_field(record, "toolCallId", line)
        event.pair_id = call_id
        name = self.outer_calls.pop(call_id, "")
        event.tool = name
        output = record.get("output")
        tool_message = output.get("toolMessage") if isinstance(output, dict) else None
        is_error = tool_message.get("isError") if isinstance(tool_message, dict) else None
        if is_error is True:
            event.kind = Kind.TOOL_ERROR
        # A run_python block's failure is counted once, on its rlm_complete (which this outer
        # result only repeats); any other tool's result is where its failure shows.
        if name != RUN_PYTHON and isinstance(is_error, bool):
            event.failed = is_error
            event.is_error = is_error

    def _rlm_start(
        self, event: CanonicalEvent, record: dict[str, Any], at_ms: float | None, line: int
    ) -> list[CanonicalEvent] | None:
        call_id = self._text_field(record, "toolCallId", line)
        code = self._text_field(record, "code", line)
        self.step += 1
        event.step = self.step
        assistant = self._message_of_block(call_id, code, at_ms)
        index, matched = 0, False
        if assistant is not None:
            if call_id in assistant["ids"]:
                index, matched = assistant["ids"].index(call_id), True
            elif code in assistant["codes"]:
                index, matched = assistant["codes"].index(code), True
        description = record.get("description") if isinstance(record.get("description"), str) else ""
        described = assistant.get("descriptions", ()) if assistant is not None else ()
        # Only the call this block runs lends its description (the latest message's first call,
        # taken for an unmatched block, described another step).
        if not description and matched and index < len(described):
            # daycare's rlmExecute writes rlm_start without one; the run_python call it runs
            # carries it in its arguments (the flat loop's rlm_start has it itself).
            description = described[index]
        self.blocks[call_id] = {
            "step": self.step, "code": code, "description": description, "at": at_ms, "line": line,
            "inner": None, "inner_tools": [], "tokens": self.unassigned_tokens,
        }  # fmt: skip
        self.unassigned_tokens = 0
        if at_ms is not None and (self.max_start_at is None or at_ms > self.max_start_at):
            self.max_start_at = at_ms
        if call_id not in self.completed:
            self.starts[call_id] = {
                "at": at_ms, "line": line, "block_index": index, "event_index": self.position,
                "code": code, "assistant": assistant,
            }  # fmt: skip

    def _rlm_tool_call(
        self, event: CanonicalEvent, record: dict[str, Any], at_ms: float | None, line: int
    ) -> list[CanonicalEvent] | None:
        call_id = self._text_field(record, "toolCallId", line)
        name = self._text_field(record, "toolName", line)
        count = number(record, "toolCallCount", "toolCallCount", line, self.problems)
        snapshot = record.get("snapshot")
        if isinstance(snapshot, str):
            # The VM snapshot (base64) stays in the raw record only; the payload notes its size.
            event.payload.pop("snapshot", None)
            event.payload["snapshot_chars"] = len(snapshot)
        snapshot_id = record.get("snapshotId") if isinstance(record.get("snapshotId"), str) else ""
        if not isinstance(snapshot, str) and not snapshot_id:
            self.problems.add(line, "snapshot", "rlm_tool_call without snapshot or snapshotId")
        event.tool = name
        event.pair_id = f"{call_id}#{int(count) if count is not None else '?'}"
        block = self.blocks.get(call_id)
        if block is not None:
            event.step = block["step"]
            block["inner"] = {"pair_id": event.pair_id, "name": name}
            block["inner_tools"].append(name)
        if call_id not in self.completed:
            latest = self.latest_call.get(call_id)
            if latest is None or (at_ms is not None and (latest["at"] is None or at_ms > latest["at"])):
                self.latest_call[call_id] = {
                    "at": at_ms, "line": line, "snapshot": snapshot_id or "inline",
                    "tool": name, "event_index": self.position,
                }  # fmt: skip

    def _rlm_tool_result(
        self, event: CanonicalEvent, record: dict[str, Any], at_ms: float | None, line: int
    ) -> list[CanonicalEvent] | None:
        call_id = self._text_field(record, "toolCallId", line)
        name = self._text_field(record, "toolName", line)
        is_error = self._bool_field(record, "toolIsError", line)
        event.tool = name
        event.failed = is_error
        if is_error:
            event.kind = Kind.TOOL_ERROR
            event.is_error = True
        if "deferredPayload" in record and call_id not in self.completed:
            # A send the block holds back until it succeeds: a restart restores it (daycare's
            # persistedDeferredEntries: every such result of the pending block).
            self.deferred[call_id] = self.deferred.get(call_id, 0) + 1
        block = self.blocks.get(call_id)
        if block is None:
            return
        event.step = block["step"]
        inner = block["inner"]
        if inner is None:
            self.problems.add(line, "toolCallId", "rlm_tool_result with no rlm_tool_call before it: not paired")
        elif inner["name"] != name:
            self.problems.add(
                line, "toolName",
                f"result of {name!r} but the pending inner call is {inner['name']!r}: not paired",
            )  # fmt: skip
        else:
            event.pair_id = inner["pair_id"]
            block["inner"] = None

    def _rlm_complete(
        self, event: CanonicalEvent, record: dict[str, Any], at_ms: float | None, line: int
    ) -> list[CanonicalEvent] | None:
        call_id = self._text_field(record, "toolCallId", line)
        is_error = self._bool_field(record, "isError", line)
        count = number(record, "toolCallCount", "toolCallCount", line, self.problems)
        error = self._text_field(record, "error", line, required=False)
        output = text(record.get("output"))
        print_output = record.get("printOutput")
        self.completed.add(call_id)
        self.starts.pop(call_id, None)
        self.latest_call.pop(call_id, None)
        self.deferred.pop(call_id, None)
        block = self.blocks.pop(call_id, None)
        if block is None:
            self.step += 1
            block = {"step": self.step, "code": "", "description": "", "at": None, "inner_tools": [], "tokens": 0}
        event.step = block["step"]
        event.tool = RUN_PYTHON
        event.failed = is_error
        event.is_error = is_error
        if is_error and not error:
            error = "run_python failed"
        duration = at_ms - block["at"] if at_ms is not None and block["at"] is not None else None
        event.duration_ms = duration
        event.step_state = _step_state(
            step=block["step"], event=event, code=block["code"], description=block["description"],
            success=not is_error, output=output, error=error, duration_ms=duration,
            tokens=block["tokens"],
            raw_action={"toolCallId": call_id, "code": block["code"]},
            raw_observation={
                "printOutput": print_output if isinstance(print_output, list) else [],
                "toolCallCount": int(count) if count is not None else None,
                "innerTools": block["inner_tools"],
            },
        )  # fmt: skip

    def _assistant_rewrite(
        self, event: CanonicalEvent, record: dict[str, Any], at_ms: float | None, line: int
    ) -> list[CanonicalEvent] | None:
        """daycare's agentHistoryContext: the text of the assistant message at `assistantAt`
        (else the latest one) becomes `text`: its first text part takes it, its other text
        parts go, its tool calls stay; a message without text is left as it is. The rebuilt
        conversation shows it from this record on (`rewrites` names the message's event)."""
        new_text = self._text_field(record, "text", line)
        assistant_at = record.get("assistantAt")
        if isinstance(assistant_at, bool) or not isinstance(assistant_at, (int, float)):
            self.problems.add(line, "assistantAt", f"not a time: {clip(text(assistant_at), 40)}")
            assistant_at = None
        named = self.assistant_by_at.get(assistant_at) if assistant_at is not None else None
        target = named or self.last_assistant
        if target is None:
            self.problems.add(line, "assistantAt", "no assistant message before it: nothing rewritten")
            return None
        if target["has_text"]:
            event.payload["rewrites"] = {"seq": target["index"], "line": target["line"]}
        if named is not None and named["ids"]:
            # What a restart re-runs reads this text (agentLoopPendingPhaseResolve applies a
            # rewrite only to the message at exactly its assistantAt).
            named["text"] = new_text
        return None

    def _message_of_block(self, call_id: str, code: str, at_ms: float | None) -> dict[str, Any] | None:
        """The assistant message a run_python block belongs to: the one holding its call id,
        else its code, else the latest with blocks, among those not after it."""

        def before(info: dict[str, Any]) -> bool:
            return at_ms is None or info["at"] is None or info["at"] <= at_ms

        found = self.run_python_by_id.get(call_id) if call_id else None
        if found is not None and before(found):
            return found
        recent = [info for info in reversed(self.run_python_recent) if before(info)]
        return next((info for info in recent if code in info["codes"]), recent[0] if recent else None)

    # Helpers ------------------------------------------------------------------------------

    def _text_field(self, record: dict[str, Any], key: str, line: int, *, required: bool = True) -> str:
        value = record.get(key)
        if isinstance(value, str):
            return value
        if value is None:
            if required:
                self.problems.add(line, key, f"missing {key}")
            return ""
        self.problems.add(line, key, f"{key} is {json_kind(value)}, not text")
        return text(value)

    def _bool_field(self, record: dict[str, Any], key: str, line: int) -> bool:
        value = record.get(key)
        if isinstance(value, bool):
            return value
        self.problems.add(line, key, f"not a boolean: {clip(text(value), 40)} (taken as false)")
        return False

    def finish(self, last: CanonicalEvent | None) -> None:
        """The recovery phase, exactly as daycare's agentLoopPendingPhaseResolve decides it.

        `last` is the latest event of a block still open (held back), if any.
        """
        metadata = self.meta.metadata
        pending = None
        pending_id = ""
        for call_id, start in self.starts.items():  # insertion order: the first wins a tie
            if pending is None or (start["at"] is not None and (pending["at"] is None or start["at"] > pending["at"])):
                pending, pending_id = start, call_id
        if pending is not None:
            snapshot = self.latest_call.get(pending_id)
            phase = "tool_call" if snapshot is not None else "error"
            metadata.update({
                "pending_phase": phase,
                "pending_tool_call_id": pending_id,
                "pending_block_index": pending["block_index"],
                "pending_line": pending["line"],
                "pending_event_index": pending["event_index"],
                "pending_action": RESUME_MESSAGE[phase],
            })  # fmt: skip
            if snapshot is not None:
                metadata["pending_snapshot"] = snapshot["snapshot"]
                metadata["pending_snapshot_line"] = snapshot["line"]
                metadata["pending_deferred"] = self.deferred.get(pending_id, 0)
            context = pending["assistant"]
            if context is None:  # no message holds it: the block alone, as daycare falls back
                context = {"at": None, "line": None, "index": None, "text": "", "ids": [pending_id],
                           "codes": [pending["code"]]}  # fmt: skip
            # The error phase only completes the block; the tool_call phase resumes it and then
            # runs the message's blocks after it.
            stop = pending["block_index"] + 1 if phase == "error" else len(context["ids"])
            self._note_recovery(context, pending["block_index"], stop, interrupted=True)
            self.meta.completed = False
            self.meta.interrupted = True
            block = self.blocks.get(pending_id)
            if last is not None and block is not None and last.step == block["step"] and last.step_state is None:
                self._close_interrupted(last, block, pending_id, phase)
            return
        assistant = self.assistant
        if assistant is not None and not (
            self.max_start_at is not None and assistant["at"] is not None and self.max_start_at > assistant["at"]
        ):
            metadata.update({
                "pending_phase": "vm_start",
                "pending_tool_call_id": assistant["ids"][0],
                "pending_block_index": 0,
                "pending_blocks": len(assistant["ids"]),
                "pending_line": assistant["line"],
                "pending_event_index": assistant["index"],
                "pending_action": RESUME_MESSAGE["vm_start"],
            })  # fmt: skip
            self._note_recovery(assistant, 0, len(assistant["ids"]), interrupted=False)
            self.meta.completed = False
            self.meta.interrupted = True
            return
        metadata["pending_phase"] = None
        self.meta.completed = True

    def _note_recovery(self, message: dict[str, Any], first: int, stop: int, *, interrupted: bool) -> None:
        """What a restart takes up: the run_python blocks first..stop-1 of `message`, each with
        its call id, and the assistant message they belong to (its text as rewritten)."""
        self.meta.metadata["pending_assistant"] = {
            "at": message["at"], "line": message["line"], "event_index": message["index"],
            "text": clip(message["text"], STEP_TEXT_LIMIT),
        }  # fmt: skip
        self.meta.metadata["pending_run_python"] = [
            {
                "index": index,
                "tool_call_id": message["ids"][index],
                "code": clip(message["codes"][index], 500),
                "state": "interrupted" if interrupted and index == first else "not started",
                "assistant_event_index": message["index"],
            }
            for index in range(first, min(stop, len(message["ids"])))
        ]

    def _close_interrupted(self, last: CanonicalEvent, block: dict[str, Any], call_id: str, phase: str) -> None:
        last.step_state = _step_state(
            step=block["step"], event=last, code=block["code"], description=block["description"],
            success=False, output="", error=f"interrupted ({phase} phase): {RESUME_MESSAGE[phase]}",
            duration_ms=_elapsed_ms(block["at"], last), tokens=block["tokens"],
            raw_action={"toolCallId": call_id, "code": block["code"]},
            raw_observation={"pending_phase": phase, "innerTools": block["inner_tools"]},
        )  # fmt: skip


def _elapsed_ms(start_ms: float | None, event: CanonicalEvent) -> float | None:
    if start_ms is None or event.timestamp is None:
        return None
    return max(0.0, event.timestamp.timestamp() * 1000.0 - start_ms)


def _step_state(*, event: CanonicalEvent, code: str, description: str, **outcome: Any) -> dict[str, Any]:
    """A run_python block's StepState; `outcome` holds the rest of unrewarded_step_state's
    arguments."""
    return unrewarded_step_state(
        timestamp=event.timestamp.isoformat() if event.timestamp is not None else "",
        action_type=RUN_PYTHON,
        action_code=code,
        action_rationale=description,
        **outcome,
    )


_HANDLERS = {
    "user_message": _History._user_message,
    "assistant_message": _History._assistant_message,
    "assistant_rewrite": _History._assistant_rewrite,
    "tool_result": _History._tool_result,
    "rlm_start": _History._rlm_start,
    "rlm_tool_call": _History._rlm_tool_call,
    "rlm_tool_result": _History._rlm_tool_result,
    "rlm_complete": _History._rlm_complete,
}
