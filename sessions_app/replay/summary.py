"""A session as the API and pages describe it: its info, chain status, AgentLens summary and rlm-code summary."""

from __future__ import annotations

from typing import Any

from ..models import Session
from .rows import _iso


def session_info(session: Session) -> dict[str, Any]:
    return {
        "id": session.pk,
        "projectId": session.project_id,
        "sourceSessionId": session.source_session_id,
        "runId": session.run_id,
        "agentId": session.agent_id,
        "format": session.source_format,
        "status": str(session.status),
        "completed": session.completed,
        "task": session.task,
        "environment": session.environment,
        "model": session.model,
        "startedAt": _iso(session.started_at),
        "endedAt": _iso(session.ended_at),
        "createdAt": _iso(session.created_at),
        "eventCount": session.event_count,
        "stepCount": session.step_count,
        # The session that ran this one as a sub-agent (OpenTelemetry ingest), else null.
        "parentId": session.parent_id,
        "chain": chain_status(session),
        # The source's own hash chain as the importer found it (AgentLens's prevHash/hash);
        # null when the source carries no hashes.
        "sourceChain": (session.metadata or {}).get("source_chain"),
    }


def chain_status(session: Session) -> dict[str, Any]:
    """What the last verification found (the badge's text, for the API)."""
    return {
        "state": session.chain_state,
        "checkedAt": _iso(session.chain_checked_at),
        "brokenSeq": session.chain_broken_seq,
        "checkedEvents": session.chain_checked_count,
    }


def replay_summary(session: Session) -> dict[str, Any]:
    """The AgentLens `summary` block of a replay page."""
    return {
        "totalCost": session.cost_usd,
        "totalDurationMs": session.duration_seconds * 1000.0,
        "totalLlmCalls": session.llm_calls,
        "totalToolCalls": session.tool_calls,
        "totalErrors": session.error_count,
        "models": list(session.models_used or []),
        "tools": list(session.tools_used or []),
    }


# Summary


def get_summary(*, session: Session) -> dict[str, Any]:
    """rlm-code's `SessionReplayer.get_summary()` keys, plus totals rlm-code does not keep.

    No query: every figure is a running total kept on the session row by ingest.
    """
    return {
        "session_id": session.source_session_id or str(session.pk),
        "run_id": session.run_id or session.source_session_id or str(session.pk),
        "task": (session.task or "")[:100],
        "environment": session.environment,
        "model": session.model,
        "completed": session.completed,
        "total_steps": session.step_count,
        "total_reward": session.reward,
        "total_tokens": session.tokens,
        "duration_seconds": session.duration_seconds,
        "success_rate": session.success_rate,
        "error_count": session.step_error_count,
        "totalCost": session.cost_usd,
        "costKnown": session.cost_known,
        "unpricedEvents": session.unpriced_events,
        "totalEvents": session.event_count,
        "llmCalls": session.llm_calls,
        "toolCalls": session.tool_calls,
        "models": list(session.models_used or []),
        "tools": list(session.tools_used or []),
        "errorEvents": session.error_count,
        "chainValid": session.chain_valid,
        "status": str(session.status),
        "format": session.source_format,
    }
