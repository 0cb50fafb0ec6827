"""Replay's read side as Model Context Protocol tools, for an agent or a developer's coding
assistant (docs/mcp.md).

- `server.py` defines the tools (names, descriptions and input schemas written for an LLM
  reader) and runs each read in a worker thread as the caller's identity;
- one module per tool group turns the read side's answers into text an LLM reads well:
  `timeline.py` (replay_session, find_errors, in AgentLens's timeline format), `state.py`
  (step_state), `finding.py` (list_sessions, search_events), `comparing.py`
  (compare_sessions), `discussion.py` (get_comments); `lookup.py` finds a session by Replay's id
  or the source's own id, and `text.py` holds the shared formatting;
- `http.py` serves them over streamable HTTP at /mcp (replay_site/asgi.py mounts it), with an
  API key; `manage.py mcp` serves them over stdio as one user or key.

Nothing here queries the database itself: every read is a read-side function
(sessions_app/replay/, comments.py) on an object fetched through sessions_app/access.py, so a
session of a project the caller is not a member of is "not found", as on every other route.
"""
