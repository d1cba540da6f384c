"""Single sign-on settings: the role map's syntax, which claim names the user, which roles a user's
groups give, and the server's refusals of an incomplete configuration (exit 2, saying what to add)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from phalanx.cli.server import oidc_config
from phalanx.errors import UsageError
from phalanx.server.oidc import OidcConfig, RelyingParty, parse_role_map
from phalanx.store.accounts import Role


def test_the_role_map_reads_repeated_and_comma_separated_entries() -> None:
    mapped = parse_role_map(["ml-vision=vision:editor", "leads=vision:admin, ml-nlp=nlp:viewer"])
    assert mapped == {
        "ml-vision": [("vision", Role.editor)],
        "leads": [("vision", Role.admin)],
        "ml-nlp": [("nlp", Role.viewer)],
    }


@pytest.mark.parametrize("entry", ["ml-vision", "ml-vision=vision", "=vision:editor", "g=vision:owner"])
def test_a_malformed_role_map_entry_says_the_expected_form(entry: str) -> None:
    with pytest.raises(UsageError, match="--oidc-role-map"):
        parse_role_map([entry])


def _rp(**kw: object) -> RelyingParty:
    return RelyingParty(OidcConfig(issuer="https://idp.example", client_id="c", client_secret="s", **kw))  # type: ignore[arg-type]


def test_the_user_claim_falls_back_to_email_then_sub() -> None:
    rp = _rp()
    assert rp.user_name({"preferred_username": "ada", "email": "a@x.org", "sub": "1"}) == "ada"
    assert rp.user_name({"email": "a@x.org", "sub": "1"}) == "a@x.org"
    assert rp.user_name({"sub": "1"}) == "1"
    assert _rp(user_claim="upn").user_name({"upn": "ada@corp", "preferred_username": "x"}) == "ada@corp"


def test_groups_give_the_highest_mapped_role_and_unmapped_projects_none() -> None:
    rp = _rp(
        groups_claim="groups", role_map=parse_role_map(["a=vision:viewer", "b=vision:editor", "c=nlp:admin"])
    )
    assert rp.roles({"groups": ["b", "a", "other"]}) == {"vision": Role.editor, "nlp": None}
    assert rp.roles({"groups": "c"}) == {"vision": None, "nlp": Role.admin}
    assert rp.roles({}) == {"vision": None, "nlp": None}


def _config(monkeypatch: pytest.MonkeyPatch, **kw: object) -> OidcConfig | None:
    monkeypatch.delenv("PHALANX_OIDC_CLIENT_SECRET", raising=False)
    monkeypatch.delenv("PHALANX_OIDC_ROLE_MAP", raising=False)
    args: dict[str, object] = {
        "issuer": "https://idp.example/realms/lab/",
        "client_id": "phalanx",
        "secret_file": None,
        "user_claim": "preferred_username",
        "groups_claim": None,
        "role_map": None,
        "redirect_url": None,
    }
    args.update(kw)
    return oidc_config(**args)  # type: ignore[arg-type]


def _refused(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, **kw: object) -> str:
    with pytest.raises(typer.Exit) as exc:
        _config(monkeypatch, **kw)
    assert exc.value.exit_code == 2
    return capsys.readouterr().err


def test_the_client_secret_comes_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "PHALANX_OIDC_CLIENT_SECRET" in _refused(capsys, monkeypatch)
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    config = _config(monkeypatch, secret_file=secret)
    assert config is not None
    assert config.client_secret == "s3cret"
    assert config.issuer == "https://idp.example/realms/lab"  # the discovery URL is built from it
    assert "s3cret" not in repr(config)  # never in a log line that prints the settings


def test_an_incomplete_sso_configuration_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    assert _config(monkeypatch, issuer=None, client_id=None) is None  # no SSO: fine
    assert "--oidc-issuer" in _refused(capsys, monkeypatch, issuer=None)
    assert "--oidc-client-id" in _refused(capsys, monkeypatch, client_id=None, secret_file=secret)
    assert "https" in _refused(capsys, monkeypatch, issuer="http://idp.example", secret_file=secret)
    err = _refused(capsys, monkeypatch, secret_file=secret, role_map=["g=vision:editor"])
    assert "--oidc-groups-claim" in err
    err = _refused(capsys, monkeypatch, secret_file=secret, groups_claim="groups", role_map=["g=vision"])
    assert "GROUP=PROJECT:ROLE" in err
