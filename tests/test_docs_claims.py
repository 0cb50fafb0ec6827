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
# Read by the code but deliberately undocumented for operators (none now).
UNDOCUMENTED_SETTINGS: set[str] = set()


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
    missing_from_table = _code_env_names() - table - UNDOCUMENTED_SETTINGS
    assert missing_from_table == set()
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


def _section(doc: str, heading: str) -> str:
    """The text of a doc's section, from its heading to the next heading of any level."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert heading in text, f"{doc} no longer has the heading {heading!r}"
    return re.split(r"\n#{1,6} ", text.split(heading, 1)[1], maxsplit=1)[0]


def _names(cell: str) -> list[str]:
    """The backticked names of a table cell outside parentheses, with `_suffix` shorthands
    (`approval_granted` / `_denied`) spelled out from the full name before them."""
    names: list[str] = []
    for name in re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", cell)):
        if name.startswith("_") and names:
            name = names[-1].rsplit("_", 1)[0] + name
        names.append(name)
    return names


def _kind_table(doc: str, heading: str) -> dict[str, str]:
    """A format's `| source type | kind | ...` table as {source type: kind}; rows whose first
    cell names no type ("anything else", derived events) are left out."""
    mapping: dict[str, str] = {}
    for line in _section(doc, heading).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not line.startswith("| `"):
            continue
        sources = _names(cells[0])
        kinds = sources if cells[1] == "same names" else _names(cells[1])
        if len(kinds) == 1:
            kinds = kinds * len(sources)
        assert len(kinds) == len(sources), f"{doc}: cannot read the row {line!r}"
        mapping.update(zip(sources, kinds, strict=True))
    return mapping


def test_docs_formats_vocabulary_is_the_canonical_kinds() -> None:
    from sessions_app.canonical import ALL_KINDS

    table = _section("docs/formats.md", "## The canonical vocabulary")
    listed = {name for line in table.splitlines() if line.startswith("| `") for name in _names(line.split("|")[1])}
    assert listed == set(ALL_KINDS)


@pytest.mark.parametrize(
    ("heading", "module"),
    [
        ("### Native session JSONL", "sessions_app.formats.rlm_native"),
        ("### AgentLens (`agentlens`)", "sessions_app.formats.agentlens"),
        ("### daycare (`daycare`)", "sessions_app.formats.daycare"),
    ],
)
def test_docs_formats_maps_each_source_type_as_the_converter_does(heading: str, module: str) -> None:
    import importlib

    kinds = importlib.import_module(module).KINDS
    assert _kind_table("docs/formats.md", heading) == dict(kinds)


def test_docs_redaction_lists_exactly_the_detectors() -> None:
    from sessions_app.redaction import DETECTORS

    text = (ROOT / "docs" / "redaction.md").read_text(encoding="utf-8")
    table = text.split("| detector (= label) | finds |", 1)[1].split("\n\n", 1)[0]
    listed = re.findall(r"^\| `([a-z0-9_]+)` \|", table, flags=re.MULTILINE)
    assert listed == list(DETECTORS)


# Dashboard and API addresses the docs name; /mcp and /static/ are served beside Django's URLs.
_NOT_IN_URLCONF = {"/mcp", "/static/", "/api"}


def test_every_address_named_in_the_docs_resolves() -> None:
    from django.urls import Resolver404, resolve

    prefixes = (
        "about|account|accounts|admin|api|compare|healthz|imports|projects|s|search|sessions|share-links|tours|v1"
    )
    named = set(re.findall(rf"`(?:GET |POST |GET\|POST )?(/(?:{prefixes})\b[^` ]*)`", _text(DOCS)))
    assert len(named) > 20
    unknown = []
    for address in sorted(named - _NOT_IN_URLCONF):
        path = re.sub(r"<[^>]+>|\{[^}]+\}", "1", address.split("?", 1)[0].split("#", 1)[0])
        try:
            resolve(path)
        except Resolver404:
            unknown.append(address)
    assert unknown == []


def test_templates_and_static_files_named_in_the_docs_exist() -> None:
    text = _text(DOCS)
    named = set(re.findall(r"(?<![\w/])((?:templates|static)/[\w./{},-]*[\w}/])", text))
    named |= {f"templates/{name}" for name in re.findall(r"(?<![\w/])(sessions_app/[\w/]+\.html)", text)}
    paths = set()
    for name in named:  # static/js/{replay,player}.js names two files
        brace = re.search(r"\{([^}]+)\}", name)
        paths |= (
            {name[: brace.start()] + part + name[brace.end() :] for part in brace.group(1).split(",")}
            if brace
            else {name}
        )
    assert len(paths) > 10
    assert sorted(path for path in paths if not (ROOT / path).exists()) == []


def test_module_attributes_named_in_the_docs_exist() -> None:
    """`sessions_app/ingest/uploads.accept_upload`, `replay/navigation.search_sessions`: the
    module is there and holds the name."""
    import importlib

    text = _text(DOCS)
    files = {"py", "html", "md", "js", "css", "json", "jsonl", "pem", "sqlite3", "zip", "gz", "sig"}
    rooms = "sessions_app/|replay_site/|replay/|ingest/|models/|formats/|mcp/|views/|api/"
    named = {
        (module, attribute)
        for module, attribute in re.findall(rf"(?<![\w/.])((?:{rooms})(?:\w+/)*\w+)\.([A-Za-z_]\w*)(?![\w/])", text)
        if attribute not in files
    }
    assert named, "no module.attribute references found in the docs"
    missing = []
    for module, attribute in sorted(named):
        if not module.startswith(("sessions_app/", "replay_site/")):
            module = "sessions_app/" + module
        try:
            found = hasattr(importlib.import_module(module.replace("/", ".")), attribute)
        except ImportError:
            found = False
        if not found:
            missing.append(f"{module}.{attribute}")
    assert missing == []


@pytest.mark.django_db
def test_docs_bundles_lists_what_a_bundle_holds(make_session) -> None:
    import io
    import zipfile

    import orjson

    from sessions_app.bundles import stream_bundle

    text = (ROOT / "docs" / "bundles.md").read_text(encoding="utf-8")
    table = text.split("## What is in it", 1)[1].split("\n\n", 2)[1]
    rows = {row.split("|")[1].strip().strip("`"): row for row in table.splitlines() if row.startswith("| `")}
    session = make_session(events=3)  # no kept original: `original/<name>` is absent
    archive = zipfile.ZipFile(io.BytesIO(b"".join(stream_bundle(session=session, exported_by="tests"))))
    assert set(archive.namelist()) == set(rows) - {"original/<name>"}

    event = orjson.loads(archive.open("events.jsonl").readline())
    listed = re.findall(r"`([a-z_]+)`", rows["events.jsonl"].split("Derived columns", 1)[0])
    assert set(event) == set(listed)
    manifest = orjson.loads(archive.read("manifest.json"))
    chain = re.search(r'"chain": \{([^}]*)\}', rows["manifest.json"])
    assert chain, "docs/bundles.md no longer lists the manifest's chain"
    top = re.findall(r'"([a-z_]+)"', rows["manifest.json"].replace(chain.group(1), ""))
    assert set(manifest) == set(top)
    assert set(manifest["chain"]) == set(re.findall(r'"([a-z_]+)"', chain.group(1)))
    assert f'"format": "{manifest["format"]}"' in rows["manifest.json"]


def test_docs_ingest_lists_exactly_the_canonical_event_fields() -> None:
    from sessions_app.formats.canonical_json import CanonicalEventIn

    table = _section("docs/ingest.md", "## Canonical events").split("| field | type | notes |", 1)[1].split("\n\n")[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    listed = {name for cell in rows for name in re.findall(r"`([a-z_]+)`", cell)}
    assert listed == set(CanonicalEventIn.model_fields)


def test_the_statuses_docs_api_s_endpoint_table_names_are_the_schema_s() -> None:
    """Each status a row of the endpoint table names is one its operation answers, and each
    success other than 200 is named (or the row says it is "the same" as the one above)."""
    from replay_site.api import api

    def normal(path: str) -> str:
        return re.sub(r"\{[^}]+\}", "{}", path.split("?", 1)[0])

    schema = api.get_openapi_schema()["paths"]
    answers = {(method.upper(), normal(path)): set(op["responses"]) for path, ops in schema.items() for method, op in ops.items()}  # fmt: skip
    table = _section("docs/api.md", "## Endpoints")
    rows = re.findall(r"^\| `([A-Z]+) ([^`]+)`[^|]*\| (.*) \|$", table, flags=re.MULTILINE)
    assert len(rows) > 40
    wrong = []
    for method, path, what in rows:
        codes = answers.get((method, normal(path)))
        if codes is None:
            wrong.append(f"{method} {path}: no such operation")
            continue
        named = set(re.findall(r"(?<![\d.-])([2-5]\d\d)(?![\d-])", what))
        unnamed = {code for code in codes if code.startswith("2") and code != "200"} - named
        if named - codes or (unnamed and "the same" not in what):
            wrong.append(f"{method} {path}: names {sorted(named)}, answers {sorted(codes)}")
    assert wrong == []


def test_docs_api_parameter_tables_are_the_operations_query_parameters() -> None:
    """Each `| parameter | default | meaning |` table of docs/api.md under a `GET /api/...`
    heading lists exactly that operation's query parameters, with their defaults."""
    from replay_site.api import api

    schema = api.get_openapi_schema()["paths"]
    by_path = {re.sub(r"\{[^}]+\}", "{}", path): ops for path, ops in schema.items()}
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    tables = re.findall(r"^### `GET (/api/[^`?]+)[^\n]*\n(?:(?!#)[^\n]*\n)*?\| parameter \| default \| meaning \|\n\|[-|]+\|\n((?:\|.*\n)+)", text, flags=re.M)  # fmt: skip
    assert len(tables) >= 3
    wrong = []
    for path, rows in tables:
        parameters = {p["name"]: p["schema"] for p in by_path[re.sub(r"\{[^}]+\}", "{}", path)]["get"]["parameters"] if p["in"] == "query"}  # fmt: skip
        documented = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", rows, flags=re.M))
        if set(documented) != set(parameters):
            wrong.append(f"{path}: documents {sorted(documented)}, takes {sorted(parameters)}")
            continue
        for name, default in documented.items():
            actual = parameters[name].get("default")
            stated = default.strip().strip("`")
            if stated in {"all", "none"}:
                ok = actual in (None, "")
            elif stated in {"true", "false"}:
                ok = actual is (stated == "true")
            elif actual is None:  # left out, a position starts at the beginning (`from`)
                ok = stated == "0"
            else:
                ok = float(stated) == float(actual)
            if not ok:
                wrong.append(f"{path} {name}: documented default {stated}, schema {actual!r}")
    assert wrong == []


def test_docs_dashboard_lists_the_session_list_s_sort_orders() -> None:
    from sessions_app.forms import SORT_LABELS

    row = re.search(r"^\| `sort` \| (.*) \|$", (ROOT / "docs" / "dashboard.md").read_text("utf-8"), flags=re.M)
    assert row, "docs/dashboard.md no longer documents the sessions page's sort"
    assert set(re.findall(r"`(-?[a-z]+)`", row.group(1))) == set(SORT_LABELS)


def test_every_flag_the_docs_give_a_bench_script_is_one_it_takes() -> None:
    text = _text(DOCS)
    runs = re.findall(r"(bench/\w+\.py)((?: +--[a-z][a-z-]*(?: +[^\s`|-][^\s`|]*)?)+)", text)
    assert runs, "no bench command with flags found in the docs"
    unknown = []
    for script, flags in runs:
        source = (ROOT / script).read_text(encoding="utf-8")
        unknown += [f"{script} {flag}" for flag in re.findall(r"--[a-z][a-z-]*", flags) if f'"{flag}"' not in source]
    assert sorted(set(unknown)) == []


def test_the_roles_docs_api_s_endpoint_table_names_are_the_ones_the_sweep_enforces() -> None:
    """A row saying "(maintainers)" or "reviewers and up" names the role
    tests/test_scoping_sweep.py walks the operation with (and finds enforced)."""
    from tests.test_scoping_sweep import ROLE_NEEDED

    def normal(path: str) -> str:
        return re.sub(r"\{[^}]+\}", "{}", path.split("?", 1)[0])

    needed = {(method, normal(path)): role for (method, path), role in ROLE_NEEDED.items()}
    table = _section("docs/api.md", "## Endpoints")
    rows = re.findall(r"^\| `([A-Z]+) ([^`]+)`[^|]*\| (.*) \|$", table, flags=re.MULTILINE)
    order = ["viewer", "reviewer", "maintainer", "admin"]
    checked, wrong = 0, []
    for method, path, what in rows:
        # "(admins: anyone's)" says who else may act, not the role the operation needs.
        named = [word[:-1] for word in re.findall(r"\b(viewers|reviewers|maintainers|admins)\b(?!:)", what)]
        if not named:
            continue
        checked += 1
        stated = min(named, key=order.index)
        if needed.get((method, normal(path))) != stated:
            wrong.append(f"{method} {path}: docs say {stated}, the sweep {needed.get((method, normal(path)))}")
    assert checked > 15
    assert wrong == []
