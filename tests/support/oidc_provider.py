"""An OpenID Connect identity provider on loopback, for the single sign-on tests.

Built from authlib's own server components (its Flask ``AuthorizationServer``, the authorization
code grant with PKCE and the OpenID Connect code extension), served by werkzeug on a port it binds
itself. Its authorization endpoint approves the configured test user at once (no login form), and
its token endpoint issues an RS256-signed ID token whose signing key the JWKS document publishes.
``id_token_issuer`` / ``id_token_audience`` / ``signing_key`` (a key its JWKS does not publish) make it
issue ID tokens a relying party must refuse.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import AuthorizationCodeMixin, ClientMixin, grants
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode
from flask import Flask, jsonify
from joserfc.jwk import RSAKey
from werkzeug.serving import make_server


@dataclass
class IdpUser:
    sub: str
    preferred_username: str
    email: str
    groups: list[str] = field(default_factory=list)


@dataclass
class Client(ClientMixin):
    client_id: str
    client_secret: str
    redirect_uris: list[str] = field(default_factory=list)

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope: str) -> str:
        allowed = {"openid", "profile", "email", "groups"}
        return " ".join(s for s in scope.split() if s in allowed)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return hmac.compare_digest(client_secret.encode(), self.client_secret.encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in ("client_secret_basic", "client_secret_post") if endpoint == "token" else True

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "authorization_code"


@dataclass
class Code(AuthorizationCodeMixin):
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    nonce: str | None
    user: IdpUser
    code_challenge: str | None
    code_challenge_method: str | None
    auth_time: int = field(default_factory=lambda: int(time.time()))

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> None:
        return None


class Provider:
    """The provider's state: one client, one user who is always signed in, one RSA key."""

    def __init__(self, client_id: str, client_secret: str, user: IdpUser) -> None:
        self.client = Client(client_id, client_secret)
        self.user = user
        self.key = RSAKey.generate_key(2048, parameters={"kid": "test-key", "use": "sig", "alg": "RS256"})
        self.codes: dict[str, Code] = {}
        self.issuer = ""  # set once the port is bound
        self.id_token_issuer: str | None = None  # None: the real issuer
        self.id_token_audience: str | None = None  # None: the client id
        self.signing_key: RSAKey | None = None  # None: the published key
        self.logins = 0

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self.key.as_dict(private=False)]}


def _app(provider: Provider) -> Flask:
    app = Flask("phalanx-test-idp")
    server = AuthorizationServer(
        app,
        query_client=lambda cid: provider.client if cid == provider.client.client_id else None,
        save_token=lambda token, req: None,
    )

    class CodeGrant(grants.AuthorizationCodeGrant):
        TOKEN_ENDPOINT_AUTH_METHODS: ClassVar[list[str]] = ["client_secret_basic", "client_secret_post"]

        def save_authorization_code(self, code: str, req: Any) -> None:
            data = req.payload.data
            provider.codes[code] = Code(
                code=code,
                client_id=req.client.client_id,
                redirect_uri=req.payload.redirect_uri,
                scope=req.scope,
                nonce=data.get("nonce"),
                user=req.user,
                code_challenge=data.get("code_challenge"),
                code_challenge_method=data.get("code_challenge_method"),
            )

        def query_authorization_code(self, code: str, client: Client) -> Code | None:
            found = provider.codes.get(code)
            return found if found is not None and found.client_id == client.client_id else None

        def delete_authorization_code(self, authorization_code: Code) -> None:
            provider.codes.pop(authorization_code.code, None)

        def authenticate_user(self, authorization_code: Code) -> IdpUser:
            return authorization_code.user

    class IdToken(OpenIDCode):
        def resolve_client_private_key(self, client: Client) -> RSAKey:
            return provider.signing_key or provider.key

        def get_client_algorithm(self, client: Client) -> str:
            return "RS256"

        def get_encode_header(self, client: Client) -> dict[str, str]:
            return {"alg": "RS256", "kid": str(provider.key.kid)}

        def get_client_claims(self, client: Client) -> dict[str, Any]:
            return {
                "iss": provider.id_token_issuer or provider.issuer,
                "aud": [provider.id_token_audience or client.client_id],
            }

        def exists_nonce(self, nonce: str, req: Any) -> bool:
            return any(c.nonce == nonce for c in provider.codes.values())

        def generate_user_info(self, user: IdpUser, scope: str) -> UserInfo:
            return UserInfo(
                sub=user.sub, preferred_username=user.preferred_username, email=user.email, groups=user.groups
            )

    server.register_grant(CodeGrant, [IdToken(require_nonce=True), CodeChallenge(required=True)])

    @app.get("/.well-known/openid-configuration")
    def discovery() -> Any:
        base = provider.issuer
        return jsonify(
            issuer=base,
            authorization_endpoint=f"{base}/authorize",
            token_endpoint=f"{base}/token",
            jwks_uri=f"{base}/jwks",
            response_types_supported=["code"],
            subject_types_supported=["public"],
            id_token_signing_alg_values_supported=["RS256"],
            code_challenge_methods_supported=["S256"],
            scopes_supported=["openid", "profile", "email", "groups"],
        )

    @app.get("/jwks")
    def jwks() -> Any:
        return jsonify(provider.jwks())

    @app.get("/authorize")
    def authorize() -> Any:
        provider.logins += 1
        try:
            grant = server.get_consent_grant(end_user=provider.user)
        except OAuth2Error as error:
            return jsonify(error=error.error, error_description=error.description), 400
        return server.create_authorization_response(grant=grant, grant_user=provider.user)

    @app.post("/token")
    def token() -> Any:
        return server.create_token_response()

    return app


@contextmanager
def running_provider(
    user: IdpUser, client_id: str = "phalanx", client_secret: str | None = None
) -> Iterator[Provider]:
    """The provider on 127.0.0.1, on a port it binds (0: the kernel picks; no race with others)."""
    provider = Provider(client_id, client_secret or secrets.token_urlsafe(24), user)
    httpd = make_server("127.0.0.1", 0, _app(provider), threaded=True)
    provider.issuer = f"http://127.0.0.1:{httpd.server_port}"
    thread = threading.Thread(target=httpd.serve_forever, name="test-idp", daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
