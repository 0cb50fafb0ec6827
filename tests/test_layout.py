"""The layout shows the way data walks (../shared/STYLE.md): bytes -> formats/ -> ingest/ -> rows
-> replay/ -> api/ and views. A lower room never imports a higher one, and no modules import
each other in a circle (read from the source, so a new import cannot slip in unnoticed)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parent.parent / "sessions_app"

# Each room and the rooms it must not import. The write side knows nothing of the read side,
# the read side nothing of the write side's workings, and nothing below the API imports it.
FORBIDDEN = {
    "formats": {"ingest", "replay", "api", "views", "jobs", "verification"},
    "canonical": {"formats", "ingest", "replay", "api", "views", "jobs"},
    "chain": {"models", "ingest", "replay", "api", "views", "jobs", "formats"},
    "models": {"formats", "ingest", "replay", "api", "views", "jobs", "verification"},
    "ingest": {"replay", "api", "views", "jobs", "verification", "mcp"},
    "replay": {"ingest", "api", "views", "jobs", "mcp"},
    "verification": {"replay", "api", "views", "jobs"},
    "jobs": {"api", "views"},
    # Scoping and the audit log sit between the models and every page or operation that asks.
    "access": {"formats", "ingest", "replay", "api", "views", "jobs", "audit", "teams"},
    "audit": {"formats", "ingest", "replay", "api", "views", "jobs", "teams"},
    "teams": {"formats", "ingest", "replay", "api", "views", "jobs"},
    # The MCP tools sit beside the API: they read through the read side and access.py, write nothing.
    "mcp": {"ingest", "api", "views", "jobs"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The sessions_app modules a file imports, at any depth of its code."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("sessions_app"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("sessions_app"):
                found.add(target)
                # `from . import replay` imports a module too, not only a name.
                found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    files = [p for p in APP.rglob("*.py") if "migrations" not in p.parts]
    modules = {_module_name(p): p for p in files}
    return {name: {i for i in _imports(path) if i in modules and i != name} for name, path in modules.items()}


def _room(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def test_no_lower_room_imports_a_higher_one():
    leaks = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for target in targets
        if _room(target) in FORBIDDEN.get(_room(module), set())
    ]
    assert leaks == []


def test_no_modules_import_each_other_in_a_circle():
    graph = _graph()
    # A package's __init__ importing its own modules is how a package is made, not a cycle.
    edges = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in graph.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                cycles.append(path[path.index(target) :] + [target] if target in path else [node, target])
            elif target not in state:
                visit(target, path + [target])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert cycles == []


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_every_room_named_here_exists(room):
    assert (APP / room).is_dir() or (APP / f"{room}.py").is_file()


def test_no_template_comment_spans_lines():
    """Django's `{# #}` comment ends at its line: one spanning lines is printed on the page.
    Longer comments use {% comment %}."""
    templates = Path(__file__).resolve().parent.parent / "templates"
    open_ones = [
        f"{path.relative_to(templates)}:{number}"
        for path in templates.rglob("*.html")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if line.count("{#") > line.count("#}")
    ]
    assert open_ones == []


def test_only_jobs_py_enqueues_or_runs_jobs_with_django_q():
    # README.md and docs/ingest.md say so; admin.py may import its models, to show its tables.
    allowed = {"jobs.py": None, "admin.py": {"django_q", "django_q.admin", "django_q.models"}}
    found = {}
    for path in APP.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [alias.name for alias in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            )  # fmt: skip
            for name in names:
                if name.split(".")[0] == "django_q":
                    found.setdefault(path.relative_to(APP).as_posix(), set()).add(name)
    for module, names in found.items():
        assert module in allowed, f"{module} imports {sorted(names)}"
        assert allowed[module] is None or names <= allowed[module], f"{module} imports {sorted(names)}"
    assert "jobs.py" in found


def test_the_environment_is_read_in_settings_py_only():
    # STYLE rule 1: each variable read once, in settings.py (`manage.py mcp` read its key itself).
    readers = []
    for path in [*APP.rglob("*.py"), *(APP.parent / "replay_site").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                readers.append(path.relative_to(APP.parent).as_posix())
    # settings.py reads; the servers name the settings module and hand their children a worker count.
    allowed = {"replay_site/settings.py", "replay_site/asgi.py", "replay_site/wsgi.py", "replay_site/serving.py"}
    assert set(readers) <= allowed, sorted(set(readers) - allowed)
