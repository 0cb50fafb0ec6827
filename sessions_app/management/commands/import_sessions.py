"""Import recorded sessions from files or folders: `import_sessions PATH [PATH ...]`.

Exit status 1 when a path given gives no session (it could not be read, is no session format,
holds nothing importable, or is a folder with none), so a script sees it; files with problems
still import what is good and list what was skipped, with status 0. A file imported before is
not a failure, nor is a folder holding sessions beside other files (each said).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import orjson
from django.core.management.base import BaseCommand, CommandError

from sessions_app import audit, teams
from sessions_app.formats import known_formats
from sessions_app.ingest.importing import ImportOutcome, import_local_file
from sessions_app.jobs import enqueue_verify_after_commit, new_sessions
from sessions_app.lookalikes import shown_plainly
from sessions_app.models import Project

_STOPS = (signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


class Command(BaseCommand):
    help = "Import recorded agent sessions (format detected by content unless --format is given)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH")
        parser.add_argument("--format", choices=sorted(known_formats()), help="skip detection")
        parser.add_argument("--project", help="project slug (default: the default project)")
        parser.add_argument("--new-project", action="store_true",
                            help="create the --project if no project has that slug (it starts with no members)")  # fmt: skip
        parser.add_argument("--replace", action="store_true", help="re-import sessions already stored")
        parser.add_argument("--json", action="store_true", help="one JSON object a line per result")

    def handle(self, *args, **options) -> None:
        # SIGTERM and SIGHUP (its terminal closed) stop it as Ctrl-C does: the job it was running
        # is marked failed, not left for the watchdog to finish (import_local_file), and no
        # traceback is printed.
        main = threading.current_thread() is threading.main_thread()  # (signals are the main thread's)
        before = {sig: signal.signal(sig, _interrupt) for sig in _STOPS} if main else {}
        try:
            self._import(options)
        except KeyboardInterrupt:
            raise CommandError("interrupted: the file being imported was not stored (its job says so); "
                               "files and sessions finished before it are kept", returncode=130) from None  # fmt: skip
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)

    def _import(self, options: dict) -> None:
        project = self._project(options["project"], create=options["new_project"])
        unreadable = failed = 0
        reported: set[Path] = set()
        for name in options["paths"]:
            # One name for the operator in every entry the command leaves (the job, the imports
            # and the deletions a replace makes), as the other commands give it.
            outcomes = import_local_file(
                path=Path(name), project=project, format=options["format"] or "",
                replace=options["replace"], created_by=audit.OPERATOR,
            )  # fmt: skip
            # Verified by a worker (make run's qcluster); until then the badge says so.
            enqueue_verify_after_commit(session_ids=new_sessions(outcomes))
            audit.record_file_import(actor=audit.OPERATOR, project=project, outcomes=outcomes)
            # A path fails when it gives no session at all (one stored before counts): a folder
            # of sessions beside a README does not, though the README is said.
            if not any(outcome.session is not None for outcome in outcomes):
                failed += 1
                unreadable += any(outcome.unreadable for outcome in outcomes)
            for outcome in outcomes:
                if options["json"]:
                    self.stdout.write(orjson.dumps(outcome.to_dict()).decode())
                else:
                    self._print(outcome, with_problems=outcome.path not in reported)
                    reported.add(outcome.path)
        if failed:
            # A session format that imports nothing used to end with status 0: a script went on
            # as if the file were stored (`import_sessions notes.txt && ...`).
            said = [f"{unreadable} could not be read"] if unreadable else []
            if failed > unreadable:
                said.append(f"{failed - unreadable} imported nothing")
            raise CommandError(f"{failed} path(s) gave no session: {', '.join(said)}", returncode=1)

    def _project(self, slug: str | None, *, create: bool) -> Project:
        if not slug:
            return Project.get_default()
        if not create:
            # Refused rather than made: a mistyped slug would store the sessions in a project no
            # one is a member of, which only superusers see.
            project = Project.objects.filter(slug=slug).first()
            if project is None:
                raise CommandError(f"--project: no project with the slug {slug!r} (--new-project creates it)")
            return project
        if not teams.is_project_slug(slug):
            # As the pages and the API refuse it: no address holds another, and every page naming
            # the project failed (a 500 on the projects list and on its sessions' players).
            raise CommandError(f"--project: {slug!r} is not a slug (lowercase letters, digits, hyphens, underscores)")
        project = Project.objects.filter(slug=slug).first()
        if project is not None:
            return project
        try:
            # The workflow the pages and the API create projects with: the same checks (a slug
            # no address holds, a name no other project has: a taken name had ended in an
            # IntegrityError traceback) and its project.create entry first in the new log.
            project = teams.create_project(actor=audit.OPERATOR, name=slug, slug=slug)
        except teams.TeamError as refused:
            raise CommandError(f"--project: {refused}") from None
        self.stderr.write(f"created project {slug!r}; it has no members yet (manage.py create_user --project)")
        return project

    def _print(self, outcome: ImportOutcome, *, with_problems: bool) -> None:
        # Every line through shown_plainly: a file's name is anyone's words, and one holding a
        # terminal's escape sequences had set the title and cleared the screen; problem messages
        # escape the values they quote already.
        def out(line: str) -> None:
            self.stdout.write(shown_plainly(line))

        def err(line: str) -> None:
            self.stderr.write(shown_plainly(line))

        if outcome.error:
            err(f"error: {outcome.error}")
        else:
            verb = "already imported as" if outcome.duplicate else "imported as"
            out(
                f"{outcome.path}: {verb} session {outcome.session.pk} ({outcome.format}, "
                f"{outcome.events} events, {outcome.steps} steps, "
                f"{len(outcome.problems)} problem(s))"
            )
            if outcome.replaced:
                # Gone with their comments, sign-offs and checkpoints: said, and in the audit log.
                replaced = ", ".join(str(pk) for pk in outcome.replaced)
                out(f"  replaced and deleted session(s) {replaced} of the same source")
        if not with_problems:  # a file's problems are shared by all its sessions
            return
        for problem in outcome.problems[:20]:
            where = f"line {problem['line']}" if problem["line"] is not None else "file"
            err(f"  {outcome.path}: {where}: {problem['field']}: {problem['message']}")
        if len(outcome.problems) > 20:
            err(f"  ... {len(outcome.problems) - 20} more problem(s)")
