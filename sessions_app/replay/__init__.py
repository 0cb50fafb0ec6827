"""The read side:  step state at N, context at N, pages of steps and events, search.

Every function here answers from a bounded number of indexed reads, whatever the session's
length or the position asked for (docs/benchmarks.md):

- a page of events is one keyset range read on `(session, seq)` (a filtered page finds its first
  and last seq by a k-ary search over the running `kind_counts` stored on each event);
- a page of steps is one range read on `(session, step_pos)`;
- the context at an event is that event's own row (running totals computed at ingest) plus the
  last 50 LLM / tool events before it, read backwards on `(session, kind, seq)`;
- the variables and memory at an event are the latest keyframe Snapshot at or before it plus the
  state changes after it, which ingest guarantees are at most `KEYFRAME_EVERY` rows away.

Rows are read with raw SQL on Django's connection (the ORM's per-row cost is most of a page's
time), and payloads can be spliced into responses as `orjson.Fragment`s without being decoded
(`splice=True`, what the API uses; the dashboard gets plain dicts).
"""

from .context import agentlens_type_names, context_at, thresholds, warnings_for
from .navigation import errors_around, events_around, next_turn_boundary, search
from .pages import replay_page, resolve_kinds
from .rows import MAX_PAGE, ReplayParameterError, event_dict
from .state import iter_step_states, state_at, step_seq, step_state_at, steps_page
from .summary import chain_status, get_summary, replay_summary, session_info

__all__ = [
    "MAX_PAGE",
    "ReplayParameterError",
    "agentlens_type_names",
    "chain_status",
    "context_at",
    "errors_around",
    "event_dict",
    "events_around",
    "get_summary",
    "iter_step_states",
    "next_turn_boundary",
    "replay_page",
    "replay_summary",
    "resolve_kinds",
    "search",
    "session_info",
    "state_at",
    "step_seq",
    "step_state_at",
    "steps_page",
    "thresholds",
    "warnings_for",
]
