"""The schemas in /api/openapi.json describe what the endpoints really return: responses that
bypass ninja's validation (orjson pages) are validated here against their declared schema."""

from __future__ import annotations

import pytest

from sessions_app.api import checkpoints, compare, exports, replay, schemas, sessions
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
        ("/api/sessions", sessions.SessionListOut),
        ("/api/sessions/{id}", sessions.SessionDetailOut),
        ("/api/sessions/{id}/replay", replay.ReplayOut),
        ("/api/sessions/{id}/replay?offset=20&eventTypes=llm_call,step_end", replay.ReplayOut),
        ("/api/sessions/{id}/replay?includeContext=false", replay.ReplayOut),
        ("/api/sessions/{id}/summary", sessions.SummaryOut),
        ("/api/sessions/{id}/steps?limit=5", replay.StepsOut),
        ("/api/sessions/{id}/steps/2", schemas.StepStateOut),
        ("/api/sessions/{id}/context?seq=30", schemas.ContextOut),
        ("/api/sessions/{id}/search?q=step&at=10", replay.SearchOut),
        ("/api/sessions/{id}/checkpoints/cp", checkpoints.CheckpointStateOut),
        ("/api/sessions/{id}/verify", exports.VerifyOut),
        ("/api/compare?a={id}&b={id}", compare.CompareOut),
    ],
)
def test_response_matches_its_declared_schema(api, session, url, schema):
    body = get_json(api, url.format(id=session.pk))
    validated = schema.model_validate(body)
    # Nothing the endpoint returns is missing from the schema.
    dumped = validated.model_dump(by_alias=True)
    assert set(body) <= set(dumped), set(body) - set(dumped)


def test_operation_ids_do_not_follow_the_module_a_view_lives_in(client):
    paths = client.get("/api/openapi.json").json()["paths"]
    ids = {(path, method): op["operationId"] for path, ops in paths.items() for method, op in ops.items()}
    assert ids["/api/sessions", "get"] == "sessions_app_api_list_sessions"
    assert ids["/api/sessions/{session_id}/verify", "get"] == "sessions_app_api_verify"
    assert ids["/api/sessions", "post"] == "sessions_app_api_write_create_session"
    assert ids["/api/imports/{job_id}", "get"] == "sessions_app_api_write_import_status"
    assert len(set(ids.values())) == len(ids)  # unique, so generated clients keep one method each


def test_no_two_schemas_of_the_api_share_a_name():
    """The OpenAPI document names a schema by its class name: two classes of one name would
    describe one operation's answer with the other's fields (the fuzz test then fails on it)."""
    import importlib
    import pkgutil

    from ninja import Schema

    import sessions_app.api as package

    found: dict[str, set[str]] = {}
    for module_info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{module_info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Schema) and value.__module__ == module.__name__:
                found.setdefault(value.__name__, set()).add(module.__name__)
    assert {name: modules for name, modules in found.items() if len(modules) > 1} == {}


def test_every_reference_of_the_openapi_document_resolves(client):
    """A body we read ourselves is described by its pydantic model, whose nested models were
    `#/$defs/...` references into nothing (schemathesis found `POST /api/events`'s)."""
    document = client.get("/api/openapi.json").json()

    def refs(node):
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                yield node["$ref"]
            for value in node.values():
                yield from refs(value)
        elif isinstance(node, list):
            for value in node:
                yield from refs(value)

    found = set(refs(document))
    assert found and all(ref.startswith("#/components/schemas/") for ref in found), found
    assert {ref.rsplit("/", 1)[1] for ref in found} <= set(document["components"]["schemas"])
    events = document["paths"]["/api/events"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert events["properties"]["events"]["items"]["type"] == "object"  # the event model, inlined


def test_every_status_a_route_raises_is_in_its_declared_responses():
    """A status an endpoint raises itself (`HttpError(409, ...)`) is one a generated client and
    schemathesis expect only if the operation declares it: verify's 409 was missing."""
    import ast
    import re
    from pathlib import Path

    from replay_site.api import api as ninja_api

    document = ninja_api.get_openapi_schema()
    folder = Path(exports.__file__).parent
    missing, checked = [], 0
    for module in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                        and isinstance(decorator.func.value, ast.Name) and decorator.func.value.id == "router"
                        and decorator.args and isinstance(decorator.args[0], ast.Constant)):  # fmt: skip
                    continue
                # ninja's path converters ("{path:name}") are plain parameters in the document.
                method, path = decorator.func.attr, "/api" + re.sub(r"\{\w+:(\w+)\}", r"{\1}", decorator.args[0].value)
                declared = document["paths"][path][method]["responses"]
                for call in ast.walk(node):
                    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "HttpError"
                            and call.args and isinstance(call.args[0], ast.Constant)):  # fmt: skip
                        checked += 1
                        if str(call.args[0].value) not in declared:
                            missing.append(f"{method.upper()} {path}: {call.args[0].value} ({module.name})")
    assert checked > 10 and not missing, missing
