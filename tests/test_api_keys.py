"""`manage.py create_api_key NAME [--user U]`."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from sessions_app.models import ApiKey

pytestmark = pytest.mark.django_db


def create(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_api_key", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_key_is_printed_alone_on_the_last_line_and_stored_hashed():
    out, err = create("ci-uploader")
    key = out.strip().splitlines()[-1]
    assert key.startswith("rpl_") and len(key) > 30 and " " not in key
    stored = ApiKey.objects.get(name="ci-uploader")
    assert stored.key_hash == ApiKey.hash_key(key) and key not in stored.key_hash
    assert "shown only now" in err
    assert Client(HTTP_AUTHORIZATION=f"Bearer {key}").get("/api/sessions").status_code == 200


def test_a_key_can_belong_to_a_user():
    user = get_user_model().objects.create_user("bob")
    out, _ = create("bob's key", "--user", "bob")
    assert ApiKey.objects.get(key_hash=ApiKey.hash_key(out.strip().splitlines()[-1])).user == user
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        create("x", "--user", "nobody")
