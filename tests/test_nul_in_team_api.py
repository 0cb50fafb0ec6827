"""A NUL character in what the team, comment and sign-off endpoints store is a 400 naming the
field (PostgreSQL refuses NUL in text; it must never reach it as a 500)."""

from __future__ import annotations

import pytest
from django.test import Client

from sessions_app.models import Role

from .builders_teams import acme, member  # noqa: F401  (fixtures)


@pytest.fixture
def admin(acme) -> Client:
    client = Client()
    client.force_login(member("ada", acme, Role.ADMIN))
    return client


def test_nul_in_bodies_and_paths_is_refused_before_the_database(admin, make_session, acme):
    from sessions_app.models import Session

    session = make_session(events=3)
    Session.objects.filter(pk=session.pk).update(project=acme)
    sent = [
        admin.post(f"/api/sessions/{session.pk}/comments", {"seq": 1, "body": "a\x00b"}, content_type="application/json"),
        admin.post(f"/api/sessions/{session.pk}/reviews", {"verdict": "rejected", "note": "a\x00b"},
                   content_type="application/json"),
        admin.post("/api/projects", {"name": "x\x00y"}, content_type="application/json"),
        admin.post("/api/projects/acme/members", {"username": "a\x00b", "role": "viewer"},
                   content_type="application/json"),
    ]  # fmt: skip
    for response in sent:
        assert response.status_code == 400 and "NUL" in response.json()["detail"], response.content
    assert admin.delete("/api/projects/acme/members/a%00b").status_code == 400
    assert admin.get("/api/projects/a%00b/members").status_code == 404


def test_half_a_utf16_pair_in_a_body_is_refused_naming_where_and_a_whole_pair_is_text(admin, make_session, acme):
    # JSON may escape each half of a UTF-16 pair; one half alone is no text either database
    # stores (it was a 500 in a comment, its edit and a share link's note).
    from sessions_app.models import Comment, Session

    session = make_session(events=3)
    Session.objects.filter(pk=session.pk).update(project=acme)
    raw = {"content_type": "application/json"}
    sent = [
        admin.post(f"/api/sessions/{session.pk}/comments", b'{"seq": 1, "body": "a\\ud800b"}', **raw),
        admin.post(f"/api/sessions/{session.pk}/share-links", b'{"note": "\\udfff"}', **raw),
        admin.post(f"/api/sessions/{session.pk}/reviews", b'{"verdict": "approved", "note": "x\\uD83D"}', **raw),
    ]
    for response in sent:
        assert response.status_code == 400, response.content
        assert response.json()["detail"].startswith("the body is not valid JSON: "), response.content
        assert "surrogate" in response.json()["detail"] and "line 1 column" in response.json()["detail"]
    # Nor written as bytes, nor escaped in a UTF-16 body (the stdlib reads both; the review found them).
    for body in (b'{"seq": 1, "body": "a\xed\xa0\x80b"}', '{"seq": 1, "body": "a\\ud800b"}'.encode("utf-16-le")):
        response = admin.post(f"/api/sessions/{session.pk}/comments", body, **raw)
        assert response.status_code == 400 and "not valid JSON" in response.json()["detail"], response.content
    assert not Comment.objects.exists()
    whole = admin.post(f"/api/sessions/{session.pk}/comments", b'{"seq": 1, "body": "\\ud83d\\ude00 ok"}', **raw)
    assert whole.status_code == 201, whole.content
    assert Comment.objects.get(session=session).body == "\U0001f600 ok"
    comment = whole.json()["id"]
    edit = admin.patch(f"/api/sessions/{session.pk}/comments/{comment}", b'{"body": "\\ud800"}', **raw)
    assert edit.status_code == 400 and Comment.objects.get(pk=comment).body == "\U0001f600 ok"


@pytest.mark.parametrize(
    "hidden", ["\u202e", "\u200b", "\u2066", "\ufeff", "\x07", "\u061c", "\u00ad", "\u3164", "\u2028", "\U000e0041"]
)
def test_a_project_name_hiding_or_turning_what_a_reader_sees_is_refused(admin, client, hidden):
    # "Acme‮lanretni" reads as another name in every list; a zero-width space makes a twin.
    name = f"Acme{hidden}internal"
    answer = admin.post("/api/projects", {"name": name, "slug": "twin"}, content_type="application/json")
    assert answer.status_code == 400
    assert f"name: no invisible or direction-changing characters (U+{ord(hidden):04X})" in answer.json()["detail"]
    page = admin.post("/projects/", {"name": name, "slug": "twin"})
    assert "no invisible or direction-changing characters" in page.content.decode()
    from sessions_app.models import Project

    assert not Project.objects.filter(slug="twin").exists()
    # Names written with a zero-width non-joiner (Persian, Indic scripts) are names.
    fine = admin.post("/api/projects", {"name": "می\u200cخواهم", "slug": "fa"}, content_type="application/json")
    assert fine.status_code == 201, fine.content


def test_a_body_takes_json_types_as_declared_naming_the_field(admin, make_session, acme):
    # pydantic's lax mode read "yes" and 1 as true ({"allow_export": "yes"} allowed exports),
    # 3.0 as 3 and "7" as 7: each is refused, naming the field, and the right type is taken.
    from sessions_app.models import Session

    session = make_session(events=5)
    Session.objects.filter(pk=session.pk).update(project=acme)
    links = f"/api/sessions/{session.pk}/share-links"

    def post(path: str, body: dict):
        return admin.post(path, body, content_type="application/json")

    for field, value, said in (
        ("allow_export", "yes", "expected true or false, got a string"),
        ("allow_export", 1, "expected true or false, got 1"),
        ("expires_in_days", 3.0, "expected an integer, got 3.0"),
        ("expires_in_days", "7", "expected a number, got a string"),
    ):
        answer = post(links, {field: value})
        assert answer.status_code == 400 and answer.json()["detail"] == f"{field}: {said}", answer.content
    assert post(links, {"allow_export": True, "expires_in_days": 3}).status_code == 201
    switches = post("/api/projects/acme/redaction/try", {"detectors": {"email": "yes"}, "text": "a@example.org"})
    assert switches.status_code == 400
    assert switches.json()["detail"] == "detectors: email: expected true or false, got a string"
    comment = post(f"/api/sessions/{session.pk}/comments", {"seq": 1.0, "body": "x"})
    assert comment.status_code == 400 and comment.json()["detail"] == "seq: expected an integer, got 1.0"


def test_names_alike_in_another_spelling_or_script_are_one_name_or_refused(admin, client, make_session, acme):
    # "Café" written with a combining accent, and "Аcme" with a Cyrillic "А", had been a second
    # project, key, checkpoint and tour beside the first: twins on every list.
    from sessions_app.models import ApiKey, Checkpoint, Project, Session

    def post(path: str, body: dict):
        return admin.post(path, body, content_type="application/json")

    composed, decomposed = "Caf\u00e9", "Cafe\u0301"
    assert post("/api/projects", {"name": composed, "slug": "cafe"}).status_code == 201
    twin = post("/api/projects", {"name": decomposed, "slug": "cafe2"})
    assert twin.status_code == 400 and twin.json()["detail"] == f"name: a project named {composed!r} exists already"
    for name, scripts in (("\u0410cme", "Cyrillic and Latin"), ("\uff21cme", "fullwidth and Latin"),
                          ("Ops \u03bfps", "Greek and Latin")):  # fmt: skip
        refused = post("/api/projects", {"name": name, "slug": "lookalike"})
        assert refused.status_code == 400, refused.content
        word = name.split()[-1]
        assert refused.json()["detail"].startswith(f"name: {word!r} mixes {scripts} letters"), refused.json()
    assert not Project.objects.filter(slug="lookalike").exists()
    for number, fine in enumerate(("Москва Moscow", "Ｏｐｓ", "naïve Zürich", "東京 ops")):  # one script a word
        assert post("/api/projects", {"name": fine, "slug": f"fine-{number}"}).status_code == 201, fine
    assert admin.post("/account/keys/", {"name": f"ci-{composed}"}).status_code in (200, 302)
    assert admin.post("/account/keys/", {"name": f"ci-{decomposed}"}).status_code == 400
    assert ApiKey.objects.filter(name=f"ci-{composed}").count() == 1
    session = make_session(events=5)
    Session.objects.filter(pk=session.pk).update(project=acme)
    checkpoints = f"/api/sessions/{session.pk}/checkpoints"
    assert post(checkpoints, {"name": composed, "seq": 1}).status_code == 201
    assert post(checkpoints, {"name": decomposed, "seq": 2}).status_code == 409
    assert list(Checkpoint.objects.filter(session=session).values_list("name", flat=True)) == [composed]
    # A name written wholly in lookalike letters of another script ("АСМЕ" in Cyrillic beside
    # "ACME") mixes no script in a word, yet reads as the other: refused where names are unique.
    assert post("/api/projects", {"name": "ACME Ops", "slug": "acme-ops"}).status_code == 201
    whole = post("/api/projects", {"name": "\u0410\u0421\u041c\u0415 Ops", "slug": "acme-ops-2"})
    assert whole.status_code == 400 and whole.json()["detail"] == (
        "name: 'АСМЕ Ops' looks like another project's name (lookalike letters); name it otherwise"
    )
    assert post("/api/projects", {"name": "ＡＣＭＥ Ops", "slug": "acme-ops-3"}).status_code == 400
    assert post("/api/projects", {"name": "Acme Ops", "slug": "acme-ops-4"}).status_code == 201  # another name
    # Letters ASCII draws as two ("m" as "rn") are read apart: these are two names, not twins
    # (a review found "Modern" refused beside "Modem"); a roman numeral "ⅿ" still looks like "m".
    assert post("/api/projects", {"name": "Modem team", "slug": "modem"}).status_code == 201
    assert post("/api/projects", {"name": "Modern team", "slug": "modern"}).status_code == 201
    assert post("/api/projects", {"name": "modern lab", "slug": "modern-lab"}).status_code == 201
    assert post("/api/projects", {"name": "\u217fodern lab", "slug": "modern-lab-2"}).status_code == 400
    from sessions_app.lookalikes import skeleton

    assert skeleton("\u217fodem") == skeleton("modem") != skeleton("rnodem")
    # Lowercase fullwidth letters, which the confusables data does not list, look alike too.
    assert post("/api/projects", {"name": "deploy", "slug": "deploy"}).status_code == 201
    fullwidth = post("/api/projects", {"name": "\uff44\uff45\uff50\uff4c\uff4f\uff59", "slug": "deploy-2"})
    assert fullwidth.status_code == 400 and "looks like another project's name" in fullwidth.json()["detail"]
    assert admin.post("/account/keys/", {"name": "Cope"}).status_code in (200, 302)
    key_twin = admin.post("/account/keys/", {"name": "\u0441\u043e\u0440\u0435"})  # Cyrillic, folded as keys are
    assert (
        key_twin.status_code == 400 and "looks like ada&#x27;s active key &#x27;Cope&#x27;" in key_twin.content.decode()
    )
    assert admin.post("/account/keys/", {"name": "CI"}).status_code in (200, 302)
    ell = admin.post("/account/keys/", {"name": "Cl"})  # a small L: alike only before folding
    assert ell.status_code == 400 and "active key &#x27;CI&#x27;" in ell.content.decode()
    assert post(checkpoints, {"name": "COPE", "seq": 1}).status_code == 201
    assert post(checkpoints, {"name": "burn", "seq": 1}).status_code == 201
    assert post(checkpoints, {"name": "bum", "seq": 2}).status_code == 201
    checkpoint_twin = post(checkpoints, {"name": "\u0421\u041e\u0420\u0415", "seq": 2})  # Cyrillic
    assert checkpoint_twin.status_code == 400 and checkpoint_twin.json()["detail"] == (
        "name: looks like the checkpoint 'COPE' (lookalike letters); name it otherwise"
    )
    from sessions_app import checkpoints as checkpoint_work
    from sessions_app.access import Actor

    renamed = Checkpoint.objects.get(session=session, name=composed)
    with pytest.raises(checkpoint_work.CheckpointError, match="looks like the checkpoint 'COPE'"):
        checkpoint_work.rename_checkpoint(actor=Actor(user=None), checkpoint=renamed, name="\u0421\u041e\u0420\u0415")
    tour = post(f"/api/projects/{acme.slug}/tours", {"title": f"Onboarding {decomposed}"})
    assert tour.status_code == 201 and tour.json()["title"] == f"Onboarding {composed}"
