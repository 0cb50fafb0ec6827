"""The StepState a step-closing event carries, whatever its format: rlm-code's StepState, the
shape the player and the exports read a step by."""

from __future__ import annotations

from typing import Any

from .fields import clip

# rlm-code's StepState fields, without variables/memory_notes (they live in state changes), with
# rlm-code's defaults.
STEP_DEFAULTS: dict[str, Any] = {
    "step": 0,
    "timestamp": "",
    "action_type": "",
    "action_code": "",
    "action_rationale": "",
    "success": False,
    "output": "",
    "error": "",
    "reward": 0.0,
    "cumulative_reward": 0.0,
    "duration_ms": 0.0,
    "tokens_used": 0,
    "raw_action": {},
    "raw_observation": {},
}

# A step's texts, where a format makes them up, keep this much (the whole value stays in the
# event's payload).
STEP_TEXT_LIMIT = 4000


def unrewarded_step_state(
    *,
    step: int,
    timestamp: str,
    action_type: str,
    action_code: str,
    success: bool,
    output: str,
    error: str,
    duration_ms: float | None,
    tokens: int,
    raw_action: dict[str, Any],
    raw_observation: dict[str, Any],
    action_rationale: str = "",
) -> dict[str, Any]:
    """The StepState of a format that knows no rewards (AgentLens, flux0, daycare): both rewards
    0, no duration 0, output and error clipped to STEP_TEXT_LIMIT."""
    return {
        "step": step,
        "timestamp": timestamp,
        "action_type": action_type,
        "action_code": action_code,
        "action_rationale": action_rationale,
        "success": success,
        "output": clip(output, STEP_TEXT_LIMIT),
        "error": clip(error, STEP_TEXT_LIMIT),
        "reward": 0.0,
        "cumulative_reward": 0.0,
        "duration_ms": duration_ms or 0.0,
        "tokens_used": tokens,
        "raw_action": raw_action,
        "raw_observation": raw_observation,
    }
