"""The schemas in /api/openapi.json describe what the endpoints really return: responses that
bypass ninja's validation (orjson pages) are validated here against their declared schema."""

from __future__ import annotations

import pytest

from sessions_app import api as read_api
from sessions_app.ingest.writer import set_checkpoint

from .builders_replay import api, get_json, recorded_session  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def session(tmp_path):
    recorded, _, _ = recorded_session(tmp_path, steps=5)
    set_checkpoint(session=recorded, name="cp", seq=10)
    return recorded


@pytest.mark.parametrize(
    "url,schema",
    [
        ("/api/sessions", read_api.SessionListOut),
        ("/api/sessions/{id}", read_api.SessionDetailOut),
        ("/api/sessions/{id}/replay", read_api.ReplayOut),
        ("/api/sessions/{id}/replay?offset=20&eventTypes=llm_call,step_end", read_api.ReplayOut),
        ("/api/sessions/{id}/replay?includeContext=false", read_api.ReplayOut),
        ("/api/sessions/{id}/summary", read_api.SummaryOut),
        ("/api/sessions/{id}/steps?limit=5", read_api.StepsOut),
        ("/api/sessions/{id}/steps/2", read_api.StepStateOut),
        ("/api/sessions/{id}/context?seq=30", read_api.ContextOut),
        ("/api/sessions/{id}/search?q=step&at=10", read_api.SearchOut),
        ("/api/sessions/{id}/checkpoints/cp", read_api.CheckpointStateOut),
        ("/api/sessions/{id}/verify", read_api.VerifyOut),
        ("/api/compare?a={id}&b={id}", read_api.CompareOut),
    ],
)
def test_response_matches_its_declared_schema(api, session, url, schema):
    body = get_json(api, url.format(id=session.pk))
    validated = schema.model_validate(body)
    # Nothing the endpoint returns is missing from the schema.
    dumped = validated.model_dump(by_alias=True)
    assert set(body) <= set(dumped), set(body) - set(dumped)
