"""Small builders shared by the tests."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.test.utils import override_settings

from sessions_app.canonical import CanonicalEvent, Kind, SessionMeta, StateChange
from sessions_app.ingest.writer import append_events, create_session
from sessions_app.models import Project, Session


def pytest_collection_modifyitems(config, items) -> None:
    """Everything under tests/browser/ drives Chromium: marked `browser` whether or not its
    module says so, so `-m "not browser"` (make test's runs after the first) leaves all of it."""
    for item in items:
        if "browser" in item.path.parent.parts[-1:]:
            item.add_marker(pytest.mark.browser)


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """The production hasher with one round: its 1.2 million cost 0.8 s a password here, which
    made the users the suite's main cost. Each hash names its own rounds, so a server the tests
    start in a subprocess (with the production list) still checks these passwords."""

    iterations = 1


@pytest.fixture(autouse=True, scope="session")
def quick_password_hashing():
    # override_settings, not an assignment: its signal clears Django's cache of the hashers.
    with override_settings(PASSWORD_HASHERS=["tests.conftest.QuickPBKDF2PasswordHasher"]):
        yield


T0 = datetime(2026, 2, 8, 10, 30, tzinfo=UTC)


def synthetic_events(count: int, *, start: int = 0, t0: datetime = T0) -> Iterator[CanonicalEvent]:
    """A deterministic mix of calls, responses, steps, errors and state changes."""
    for i in range(start, start + count):
        ts = t0 + timedelta(milliseconds=250 * i)
        phase = i % 5
        if phase == 0:
            kind, extra = Kind.LLM_CALL, {"pair_id": f"c{i}", "tool": "gpt-4o"}
        elif phase == 1:
            kind, extra = (
                Kind.LLM_RESPONSE,
                {
                    "pair_id": f"c{i - 1}",
                    "tool": "gpt-4o",
                    "cost_usd": 0.001 * (i % 7),
                    "tokens": 10 + i % 13,
                },
            )
        elif phase == 2:
            kind, extra = Kind.TOOL_CALL, {"pair_id": f"t{i}", "tool": "read_file"}
        elif phase == 3:
            failed = i % 4 == 3
            kind, extra = (
                (Kind.TOOL_ERROR if failed else Kind.TOOL_RESPONSE),
                {
                    "pair_id": f"t{i - 1}",
                    "tool": "read_file",
                    "is_error": failed,
                    "failed": failed,
                },
            )
        else:
            kind, extra = (
                Kind.STEP_END,
                {
                    "step_state": {
                        "step": i // 5,
                        "success": i % 3 != 0,
                        "error": "boom" if i % 3 == 0 else "",
                        "reward": 0.5,
                        "tokens_used": 3,
                    },
                    "reward": 0.5,
                    "tokens": 3,
                    "state_change": StateChange(variables={f"v{i}": i}, memory=[f"note {i}"]),
                },
            )
        payload = {"i": i, "text": f"event {i}"}
        yield CanonicalEvent(
            kind=kind,
            source_type=kind,
            raw=orjson.dumps({"i": i, "kind": kind}).decode(),
            payload=payload,
            timestamp=ts,
            line=i + 1,
            **extra,
        )


@pytest.fixture(autouse=True)
def _no_session_failed_to_settle():
    # OTLP settling remembers, per process, the sessions that failed to settle lately (it then
    # settles their transaction one session at a time): a test starts with none remembered.
    from sessions_app.ingest import traces

    traces._failed_at.clear()
    yield
    traces._failed_at.clear()


@pytest.fixture(autouse=True)
def _kept_files_in_tmp(settings, tmp_path):
    # Imports keep a copy of each file (its original, exportable byte for byte): in the test's
    # own folder, never in the checkout's var/.
    settings.DATA_DIR = tmp_path / "data"
    settings.SIGNING_KEY_FILE = tmp_path / "data" / "signing-key.pem"


@pytest.fixture
def project(db) -> Project:
    return Project.get_default()


@pytest.fixture
def make_session(project):
    def build(events: int = 0, **meta) -> Session:
        session = create_session(
            project=project,
            source_format=meta.pop("source_format", "canonical"),
            meta=SessionMeta(**meta),
        )
        if events:
            append_events(session=session, events=synthetic_events(events))
        return session

    return build
