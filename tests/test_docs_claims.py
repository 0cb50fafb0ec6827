"""The claims in README.md and docs/ an operator acts on, checked against the code: the settings
the deployment tables name, the commands and flags the docs tell people to run, the audit actions
docs/teams.md lists, the code paths the docs point at, and the MCP answer budget. A doc that
drifts from the code fails here rather than misleading whoever follows it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parent.parent
# docs/benchmarks.md is a log of measurements, not instructions: not checked here.
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "benchmarks.md")]
CODE = [*sorted((ROOT / "replay_site").glob("*.py")), *sorted((ROOT / "sessions_app").rglob("*.py"))]
# Read by the code but deliberately undocumented for operators: the tests' synchronous job mode.
UNDOCUMENTED_SETTINGS = {"REPLAY_Q_SYNC"}


def _text(paths: list[Path]) -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in paths)


def _code_env_names() -> set[str]:
    return set(re.findall(r"""["'](REPLAY_[A-Z_]+|DATABASE_URL)["']""", _text(CODE)))


def _deployment_table_names() -> set[str]:
    text = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `([A-Z_]+)` \|", text, flags=re.MULTILINE))


def test_every_setting_in_the_deployment_tables_is_read_by_the_code() -> None:
    documented = _deployment_table_names() - {"TMPDIR"}  # read by Python's tempfile, not by us
    assert documented, "docs/deployment.md's tables were not found"
    assert documented - _code_env_names() == set()


def test_every_setting_the_code_reads_is_in_the_deployment_tables_or_a_doc() -> None:
    table = _deployment_table_names()
    docs = _text(DOCS)
    missing_from_table = _code_env_names() - table - UNDOCUMENTED_SETTINGS - {"REPLAY_MCP_KEY"}
    assert missing_from_table == set()
    # REPLAY_MCP_KEY belongs to `manage.py mcp`, documented in docs/mcp.md.
    assert "REPLAY_MCP_KEY" in (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
    assert {name for name in _code_env_names() - UNDOCUMENTED_SETTINGS if name not in docs} == set()


def test_every_replay_setting_named_in_the_docs_exists() -> None:
    named = set(re.findall(r"REPLAY_[A-Z_]*[A-Z]", _text(DOCS)))
    assert named - _code_env_names() == set()


def _command_lines() -> list[tuple[str, str]]:
    """(command, the rest of its line) for each `manage.py <command> ...` in the docs."""
    found = []
    for line in _text(DOCS).splitlines():
        for match in re.finditer(r"manage\.py ([a-z_]+)([^`|#]*)", line):
            found.append((match.group(1), match.group(2)))
    return found


def test_every_documented_manage_py_command_exists() -> None:
    commands = get_commands()
    lines = _command_lines()
    assert len(lines) > 10
    assert sorted({name for name, _ in lines if name not in commands}) == []


def test_every_documented_flag_is_one_its_command_takes() -> None:
    commands = get_commands()
    unknown = []
    for name, rest in _command_lines():
        if name not in commands:
            continue
        parser = load_command_class(commands[name], name).create_parser("manage.py", name)
        known = {option for action in parser._actions for option in action.option_strings}
        unknown += [f"{name} {flag}" for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", rest) if flag not in known]
    assert sorted(set(unknown)) == []


def _audit_actions_in_code() -> set[str]:
    prefixes = "auth|project|redaction|member|key|session|checkpoint|comment|bundle|review|retention|tour|share_link"
    return set(re.findall(rf'"((?:{prefixes})\.[a-z_]+)"', _text(CODE)))


def test_docs_teams_lists_exactly_the_audit_actions_the_code_records() -> None:
    text = (ROOT / "docs" / "teams.md").read_text(encoding="utf-8")
    section = text.split("## The audit log", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| `"))
    listed = {name for cell in re.findall(r"^\| ([^|]+) \|", table, flags=re.MULTILINE)
              for name in re.findall(r"`([a-z_]+\.[a-z_]+)`", cell)}  # fmt: skip
    from sessions_app.audit import ACTIONS

    assert listed == set(ACTIONS)
    # Every dotted action name the code spells out is one of them (the page's filter offers ACTIONS).
    assert _audit_actions_in_code() <= set(ACTIONS)


def test_code_paths_named_in_the_docs_exist() -> None:
    named = set(re.findall(r"(?<![\w/.])((?:sessions_app|replay_site|tests|bench|\.ci)/[\w./-]*\w\.py)\b", _text(DOCS)))
    assert named, "no code paths found in the docs"
    assert sorted(path for path in named if not (ROOT / path).exists()) == []


def test_no_doc_points_at_the_brief_files_outside_the_repository() -> None:
    # TEAMS.md and FORMATS.md are not in this repository; docs/teams.md and docs/formats.md are.
    offenders = [path.name for path in DOCS if re.search(r"(?<![/\w])(TEAMS|FORMATS)\.md", path.read_text("utf-8"))]
    assert offenders == []


@pytest.mark.parametrize("doc", ["README.md", "docs/mcp.md"])
def test_the_mcp_answer_budget_the_docs_state_is_the_code_s(doc: str) -> None:
    from sessions_app.mcp.text import MAX_ANSWER_CHARS

    text = (ROOT / doc).read_text(encoding="utf-8")
    assert f"{MAX_ANSWER_CHARS:,} characters" in text


def test_deployment_defaults_match_settings() -> None:
    from django.conf import settings

    text = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| `([^`]+)`", text, flags=re.MULTILINE))
    expected = {
        "REPLAY_MAX_UPLOAD_MB": settings.MAX_UPLOAD_MB,
        "REPLAY_MAX_RECORD_BYTES": settings.MAX_RECORD_BYTES,
        "REPLAY_ORIGINALS_GRACE_DAYS": settings.ORIGINALS_GRACE_DAYS,
        "REPLAY_WARN_STEP_COST_USD": settings.WARN_STEP_COST_USD,
        "REPLAY_WARN_LATENCY_MS": settings.WARN_LATENCY_MS,
        "REPLAY_WARN_REPEATED_FAILURES": settings.WARN_REPEATED_FAILURES,
        "REPLAY_JOB_TIMEOUT": settings.Q_CLUSTER["timeout"],
        "REPLAY_TAIL_POLL_SECONDS": settings.TAIL_POLL_SECONDS,
        "REPLAY_TAIL_MAX_SECONDS": settings.TAIL_MAX_SECONDS,
        "REPLAY_OTLP_SETTLE_SECONDS": settings.OTLP_SETTLE_SECONDS,
        "REPLAY_OTLP_ORPHAN_SECONDS": settings.OTLP_ORPHAN_SECONDS,
        "REPLAY_WEB_PROCESSES": settings.WEB_PROCESSES,
        "REPLAY_WEB_THREADS": settings.WEB_THREADS,
        "REPLAY_LOGIN_FAILURE_LIMIT": settings.AXES_FAILURE_LIMIT,
        "REPLAY_LOGIN_COOLOFF_MINUTES": settings.AXES_COOLOFF_TIME.total_seconds() / 60,
    }
    # Only where the test run's environment leaves the default in place.
    import os

    wrong = {
        name: (rows.get(name), value)
        for name, value in expected.items()
        if name not in os.environ and (name not in rows or float(rows[name]) != float(value))
    }
    assert wrong == {}


def test_the_recorder_retries_exactly_the_statuses_docs_ingest_names() -> None:
    from sessions_app.client import RETRYABLE_STATUSES

    text = (ROOT / "docs" / "ingest.md").read_text(encoding="utf-8")
    sentence = re.search(r"Network errors, timeouts and ([\d, and]+) are retried", text)
    assert sentence, "docs/ingest.md no longer says which statuses the recorder retries"
    assert {int(code) for code in re.findall(r"\d{3}", sentence.group(1))} == set(RETRYABLE_STATUSES)


def test_the_session_row_docs_api_lists_is_the_schema_s() -> None:
    from sessions_app.api.sessions import SessionListRowOut

    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    listed = re.search(r"A session row: `([^`]+)`", text)
    assert listed, "docs/api.md no longer lists the session row's fields"
    assert {name.strip() for name in listed.group(1).split(",")} == set(SessionListRowOut.model_fields)


def test_every_api_operation_is_in_the_docs() -> None:
    from replay_site.api import api

    def normal(path: str) -> str:
        return re.sub(r"\{[^}]+\}|<[^>]+>", "{}", path)

    lines = [normal(line) for line in _text(DOCS).splitlines()]
    missing = []
    for path, operations in api.get_openapi_schema()["paths"].items():
        for method in operations:
            wanted = normal(path)
            if not any(
                re.search(rf"{re.escape(wanted)}(?![\w/{{}}-])", line) and method.upper() in line for line in lines
            ):
                missing.append(f"{method.upper()} {path}")
    assert missing == []
