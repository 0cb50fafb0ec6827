"""Comments and tours read with their HTML kept when written, against rendering it per view.

    .venv/bin/python bench/markdown_bench.py [--comments 40] [--chars 10000] [--stops 200] [--runs 3]

Markdown is rendered by markdown-it-py (pure Python, about 15 µs a character of `[[[…`), so
`sessions_app/markdown.py` keeps the HTML beside the text. This prints, in one run on a fresh
temporary SQLite database: the comments API of a session with `--comments` comments of
`--chars` characters of "[" at one event and a tour page of `--stops` stops narrated the same
way, each read as stored (kept HTML) and as it was before (rendered on every view: the same
code with `markdown.shown` rendering the text again), and the player at that event as stored.
Best of `--runs`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comments", type=int, default=40)
    parser.add_argument("--chars", type=int, default=10_000)
    parser.add_argument("--stops", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="replay-bench-")
    os.environ.update(DATABASE_URL=f"sqlite:///{tmp.name}/bench.sqlite3", REPLAY_DATA_DIR=f"{tmp.name}/data",
                      REPLAY_DEMO="1", DJANGO_SETTINGS_MODULE="replay_site.settings")  # fmt: skip
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from sessions_app import markdown, tours
    from sessions_app.access import Actor
    from sessions_app.canonical import CanonicalEvent, Kind, SessionMeta
    from sessions_app.ingest.writer import append_events, create_session, finish_session
    from sessions_app.models import Comment, Membership, Project, Role

    call_command("migrate", verbosity=0)
    project = Project.objects.create(slug="bench", name="Bench")
    user = get_user_model().objects.create_user("bench", password="x")
    Membership.objects.create(project=project, user=user, role=Role.ADMIN)
    session = create_session(project=project, source_format="canonical", meta=SessionMeta(task="markdown"))
    events = [CanonicalEvent(kind=Kind.AGENT_MESSAGE, source_type="message", raw="{}", payload={"i": i})
              for i in range(10)]  # fmt: skip
    append_events(session=session, events=events)
    finish_session(session=session)
    text = "[" * args.chars
    started = time.perf_counter()
    for _ in range(args.comments):
        Comment.objects.create(session=session, seq=2, author_name="bench", body=text)
    tour = tours.create_tour(actor=Actor(user=user), project=project, title="Bench tour")
    tours.set_stops(actor=Actor(user=user), tour=tour, stops=[
        tours.StopSpec(session=session.pk, seq=i % 10, title=f"stop {i}", narration=text) for i in range(args.stops)
    ])  # fmt: skip
    written = time.perf_counter() - started
    client = Client()
    client.force_login(user)
    pages = {
        "comments API": f"/api/sessions/{session.pk}/comments",
        "player at the event": f"/sessions/{session.pk}/?step=2",
        "tour page": f"/tours/{tour.pk}/",
    }

    def best(url: str) -> float:
        times = []
        for _ in range(args.runs):
            began = time.perf_counter()
            response = client.get(url)
            times.append(time.perf_counter() - began)
            assert response.status_code == 200, (url, response.status_code)
        return min(times)

    kept = {name: best(url) for name, url in pages.items()}
    as_kept = markdown.shown
    markdown.shown = lambda row, field: markdown.render_markdown(getattr(row, field))  # rendered per view
    try:
        # Not the player: its Discussion list's preview rendered 320 characters of each thread
        # before, where this would render all of it.
        rendered = {name: best(url) for name, url in pages.items() if name != "player at the event"}
    finally:
        markdown.shown = as_kept
    print(f"{args.comments} comments and {args.stops} tour stops of {args.chars:,} characters of '[' "
          f"(written, HTML made once: {written:.1f} s)")  # fmt: skip
    for name in pages:
        before = (
            f"   rendered per view {rendered[name] * 1000:9.1f} ms   ({rendered[name] / kept[name]:,.0f}x)"
            if name in rendered
            else ""
        )
        print(f"  {name:22} kept HTML {kept[name] * 1000:8.1f} ms{before}")


if __name__ == "__main__":
    main()
