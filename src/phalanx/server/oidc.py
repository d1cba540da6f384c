"""Single sign-on: the server as an OpenID Connect relying party (docs/teams.md#single-sign-on).

The authorization code flow with PKCE: ``/login/sso`` sends the browser to the identity provider
with a fresh ``state``, ``nonce`` and code verifier (kept here, in memory, for ten minutes, and the
state also in a cookie that binds the flow to this browser); ``/login/sso/callback`` checks the
state, exchanges the code (authlib's OAuth 2 client, with the client secret and the verifier) and
validates the ID token: its RS256/ES256 signature against the provider's JWKS (from its discovery
document), ``iss`` equal to the configured issuer, ``aud`` holding the client id, ``exp``/``iat``
and the ``nonce``. Only then is the user named by a claim signed in, created on first login
without a password, with the project roles its groups map to.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from phalanx.errors import UsageError
from phalanx.store.accounts import Role

PENDING_SECONDS = 600  # a sign-in started at the provider must come back within this
MAX_PENDING = 10_000  # bounded memory under a flood of /login/sso requests
DISCOVERY_SECONDS = 3600  # the discovery document and the keys are fetched again after this
HTTP_TIMEOUT = 15.0
SCOPES = "openid profile email"
ALGORITHMS = ("RS256", "PS256", "ES256")  # asymmetric only: never "none", never HMAC with a guessable key


class SsoRefused(Exception):
    """A sign-in that must not succeed; the message is shown on the login page (no secrets)."""


@dataclass(frozen=True)
class OidcConfig:
    """What `phalanx server --oidc-*` was started with."""

    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    user_claim: str = "preferred_username"
    groups_claim: str | None = None
    # group name -> [(project, role)]: membership of those projects follows the provider's groups
    role_map: dict[str, list[tuple[str, Role]]] = field(default_factory=dict)
    redirect_url: str | None = None  # None: <this server's address>/login/sso/callback
    scopes: str = SCOPES


def parse_role_map(entries: list[str]) -> dict[str, list[tuple[str, Role]]]:
    """``GROUP=PROJECT:ROLE`` entries (repeatable, or comma-separated) into the map."""
    mapped: dict[str, list[tuple[str, Role]]] = {}
    for raw in (part.strip() for entry in entries for part in entry.split(",")):
        if not raw:
            continue
        group, sep, target = raw.partition("=")
        project, sep2, role_name = target.rpartition(":")
        if not sep or not sep2 or not group.strip() or not project.strip():
            raise UsageError(
                f"--oidc-role-map {raw!r}: expected GROUP=PROJECT:ROLE, e.g. 'ml-vision=vision:editor'"
            )
        try:
            role = Role.parse(role_name.strip())
        except UsageError as exc:
            raise UsageError(f"--oidc-role-map {raw!r}: {exc.message}") from None
        mapped.setdefault(group.strip(), []).append((project.strip(), role))
    return mapped


@dataclass
class _Pending:
    nonce: str
    verifier: str
    next_url: str
    redirect_uri: str
    started: float


class RelyingParty:
    """One server's OIDC client: starts sign-ins and checks what comes back."""

    def __init__(self, config: OidcConfig) -> None:
        self.config = config
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self._metadata: dict[str, Any] | None = None
        self._jwks: dict[str, Any] | None = None
        self._fetched = 0.0

    # -- the provider's documents ------------------------------------------------------------------
    def _client(self, redirect_uri: str | None = None) -> Any:
        from authlib.integrations.httpx_client import OAuth2Client  # why: the oidc extra (pyproject)

        return OAuth2Client(
            client_id=self.config.client_id,
            client_secret=self.config.client_secret,
            scope=self.config.scopes,
            redirect_uri=redirect_uri,
            code_challenge_method="S256",
            timeout=HTTP_TIMEOUT,
        )

    def metadata(self, refresh: bool = False) -> dict[str, Any]:
        """The discovery document (cached); its ``issuer`` must be exactly the configured one."""
        if self._metadata is None or refresh or time.monotonic() - self._fetched > DISCOVERY_SECONDS:
            url = self.config.issuer.rstrip("/") + "/.well-known/openid-configuration"
            import httpx  # why: the oidc extra's HTTP client (authlib's httpx_client uses it)

            with httpx.Client(timeout=HTTP_TIMEOUT) as client:  # public documents: no client auth
                try:
                    response = client.get(url)
                    response.raise_for_status()
                    document = response.json()
                    jwks = client.get(document["jwks_uri"])
                    jwks.raise_for_status()
                    keys = jwks.json()
                except Exception as exc:
                    raise SsoRefused(
                        f"the identity provider {self.config.issuer} did not answer its discovery "
                        f"document or keys ({type(exc).__name__}); tell the server's admin"
                    ) from None
            if document.get("issuer") != self.config.issuer:
                raise SsoRefused(
                    f"the identity provider's discovery document names the issuer {document.get('issuer')!r},"
                    f" not the configured {self.config.issuer!r}; tell the server's admin"
                )
            self._metadata, self._jwks, self._fetched = document, keys, time.monotonic()
        return self._metadata

    # -- the flow ----------------------------------------------------------------------------------
    def start(self, redirect_uri: str, next_url: str) -> tuple[str, str]:
        """(the provider's authorization URL to send the browser to, the state for its cookie)."""
        from authlib.common.security import generate_token  # why: the oidc extra (pyproject)

        metadata = self.metadata()
        state, nonce, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(32), generate_token(64)
        with self._client(redirect_uri) as client:
            url, _ = client.create_authorization_url(
                metadata["authorization_endpoint"], state=state, nonce=nonce, code_verifier=verifier
            )
        now = time.monotonic()
        with self._lock:
            self._pending = {k: v for k, v in self._pending.items() if now - v.started < PENDING_SECONDS}
            if len(self._pending) >= MAX_PENDING:
                raise SsoRefused("too many sign-ins are under way; try again in a few minutes")
            self._pending[state] = _Pending(nonce, verifier, next_url, redirect_uri, now)
        return str(url), state

    def finish(self, state: str, cookie_state: str, code: str) -> tuple[dict[str, Any], str]:
        """The ID token's validated claims and the page to land on, or SsoRefused."""
        if not state or not cookie_state or not hmac.compare_digest(state.encode(), cookie_state.encode()):
            raise SsoRefused(
                "this sign-in did not start in this browser (its state does not match); try again"
            )
        with self._lock:
            pending = self._pending.pop(state, None)
        if pending is None or time.monotonic() - pending.started >= PENDING_SECONDS:
            raise SsoRefused("this sign-in is unknown or took too long; try again")
        metadata = self.metadata()
        with self._client(pending.redirect_uri) as client:
            try:
                token = client.fetch_token(
                    metadata["token_endpoint"],
                    grant_type="authorization_code",
                    code=code,
                    code_verifier=pending.verifier,
                )
            except Exception as exc:
                raise SsoRefused(
                    f"the identity provider refused to exchange the code ({type(exc).__name__}: "
                    f"{getattr(exc, 'error', '') or 'see the server log'})"
                ) from None
        id_token = token.get("id_token")
        if not id_token:
            raise SsoRefused("the identity provider sent no ID token (is the 'openid' scope allowed?)")
        return self.validate(str(id_token), pending.nonce), pending.next_url

    def validate(self, id_token: str, nonce: str) -> dict[str, Any]:
        """The ID token's claims after checking its signature, issuer, audience, times and nonce."""
        from joserfc import jwt  # why: the oidc extra (authlib brings joserfc)
        from joserfc.errors import JoseError  # why: the oidc extra (authlib brings joserfc)
        from joserfc.jwk import KeySet  # why: the oidc extra (authlib brings joserfc)

        decoded = None
        for refresh in (False, True):  # the provider may have rotated its keys since they were fetched
            self.metadata(refresh=refresh)
            try:
                keys = KeySet.import_key_set(self._jwks or {"keys": []})  # type: ignore[arg-type]
                decoded = jwt.decode(id_token, keys, algorithms=list(ALGORITHMS))
                break
            except (JoseError, ValueError) as exc:
                failure = type(exc).__name__
        if decoded is None:
            raise SsoRefused(f"the ID token's signature does not check out ({failure})")
        registry = jwt.JWTClaimsRegistry(
            leeway=60,
            iss={"essential": True, "value": self.config.issuer},
            sub={"essential": True},
            exp={"essential": True},
            iat={"essential": True},
            nonce={"essential": True, "value": nonce},
        )
        claims = dict(decoded.claims)
        try:
            registry.validate(claims)
        except JoseError as exc:
            why = f"{exc.error}: {exc.description or ''}"
            raise SsoRefused(f"the ID token is not valid here ({why})") from None
        audience = claims.get("aud")
        audiences = [audience] if isinstance(audience, str) else list(audience or [])
        if self.config.client_id not in audiences:
            raise SsoRefused("the ID token was issued to another client (its audience is not this server)")
        if len(audiences) > 1 and claims.get("azp") != self.config.client_id:
            raise SsoRefused("the ID token names several audiences but its azp is not this server")
        return claims

    # -- who signed in -----------------------------------------------------------------------------
    def user_name(self, claims: dict[str, Any]) -> str:
        """The claim that names the user: the configured one, else ``email``, else ``sub``."""
        for claim in dict.fromkeys((self.config.user_claim, "email", "sub")):
            value = claims.get(claim)
            if isinstance(value, str) and value.strip():
                return value.strip()
        raise SsoRefused(f"the ID token has no {self.config.user_claim!r}, 'email' or 'sub' claim")

    def roles(self, claims: dict[str, Any]) -> dict[str, Role | None]:
        """Every mapped project: the highest role the user's groups give there (None: none)."""
        roles: dict[str, Role | None] = {
            project: None for targets in self.config.role_map.values() for project, _ in targets
        }
        if not self.config.groups_claim:
            return roles
        raw = claims.get(self.config.groups_claim)
        groups = [raw] if isinstance(raw, str) else [g for g in raw or [] if isinstance(g, str)]
        for group in groups:
            for project, role in self.config.role_map.get(group, []):
                current = roles.get(project)
                roles[project] = role if current is None or role > current else current
        return roles
