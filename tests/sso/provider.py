"""A small but real OpenID Connect provider for the tests, run as its own process on loopback:

    python -m tests.sso.provider --port 8061 --client-id rota --client-secret s3cret --users users.json

It speaks the authorization-code flow as an identity provider does: discovery
(``/.well-known/openid-configuration``), a sign-in form at ``/authorize`` that redirects back with a one-time
code, ``/token`` (client secret checked, code single-use, redirect URI matched), ID tokens signed RS256 with a
key made at start and published at ``/jwks``, and ``/userinfo`` for the bearer access token. ``users.json``
maps usernames to ``{"password", "email", "name", "groups"}``; the claims carry ``groups``.
No Django, no mocks: the portal talks to it over HTTP like to Keycloak or Entra ID."""

import argparse
import base64
import html
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlparse

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

KID = "rota-test-key"


def _b64(n: int) -> str:
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class Provider:
    """The provider's state: its key, users, the codes and access tokens it issued."""

    def __init__(self, issuer: str, client_id: str, client_secret: str, users: dict):
        self.issuer, self.client_id, self.client_secret, self.users = issuer, client_id, client_secret, users
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.codes: dict[str, dict] = {}
        self.tokens: dict[str, str] = {}
        self.lock = threading.Lock()

    def jwks(self) -> dict:
        public = self.key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": KID, "n": _b64(public.n),
                          "e": _b64(public.e)}]}

    def claims(self, username: str) -> dict:
        user = self.users[username]
        return {"sub": f"sub-{username}", "email": user["email"], "preferred_username": username,
                "name": user.get("name", username), "groups": list(user.get("groups", []))}

    def id_token(self, username: str, nonce: str | None) -> str:
        now = int(time.time())
        payload = {"iss": self.issuer, "aud": self.client_id, "iat": now, "exp": now + 300, **self.claims(username)}
        if nonce:
            payload["nonce"] = nonce
        return jwt.encode(payload, self.key, algorithm="RS256", headers={"kid": KID})


class Handler(BaseHTTPRequestHandler):
    provider: Provider

    def log_message(self, fmt, *args):  # quiet: the tests read the answers, not the log
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json", headers: dict | None = None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, data: dict):
        self._send(status, json.dumps(data).encode())

    def _form(self) -> dict[str, str]:
        length = int(self.headers.get("Content-Length") or 0)
        return {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}

    def do_GET(self):
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        p = self.provider
        if url.path == "/.well-known/openid-configuration":
            base = p.issuer
            return self._json(200, {"issuer": base, "authorization_endpoint": f"{base}/authorize",
                                    "token_endpoint": f"{base}/token", "userinfo_endpoint": f"{base}/userinfo",
                                    "jwks_uri": f"{base}/jwks", "response_types_supported": ["code"],
                                    "id_token_signing_alg_values_supported": ["RS256"]})
        if url.path == "/jwks":
            return self._json(200, p.jwks())
        if url.path == "/authorize":
            if query.get("client_id") != p.client_id or query.get("response_type") != "code":
                return self._json(400, {"error": "invalid_request"})
            hidden = "".join(f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
                             for k, v in query.items())
            page = (f"<!doctype html><title>Test IdP sign-in</title><form method=post action=/authorize>{hidden}"
                    '<label>Username <input name=username id=username></label>'
                    '<label>Password <input name=password id=password type=password></label>'
                    "<button type=submit id=signin>Sign in</button></form>")
            return self._send(200, page.encode(), "text/html; charset=utf-8")
        if url.path == "/userinfo":
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            username = p.tokens.get(token)
            if username is None:
                return self._json(401, {"error": "invalid_token"})
            return self._json(200, p.claims(username))
        return self._json(404, {"error": "not_found"})

    def do_POST(self):
        url = urlparse(self.path)
        form = self._form()
        p = self.provider
        if url.path == "/authorize":
            user = p.users.get(form.get("username", ""))
            if user is None or not secrets.compare_digest(user["password"], form.get("password", "")):
                return self._send(401, b"wrong username or password", "text/plain")
            code = secrets.token_urlsafe(24)
            with p.lock:
                p.codes[code] = {"username": form["username"], "redirect_uri": form.get("redirect_uri", ""),
                                 "nonce": form.get("nonce")}
            target = form["redirect_uri"] + "?" + urlencode({"code": code, "state": form.get("state", "")})
            return self._send(302, b"", "text/plain", {"Location": target})
        if url.path == "/token":
            if form.get("client_id") != p.client_id or not secrets.compare_digest(
                    form.get("client_secret", ""), p.client_secret):
                return self._json(401, {"error": "invalid_client"})
            with p.lock:
                grant = p.codes.pop(form.get("code", ""), None)  # single use
            if grant is None or grant["redirect_uri"] != form.get("redirect_uri"):
                return self._json(400, {"error": "invalid_grant"})
            access = secrets.token_urlsafe(24)
            p.tokens[access] = grant["username"]
            return self._json(200, {"access_token": access, "token_type": "Bearer", "expires_in": 300,
                                    "id_token": p.id_token(grant["username"], grant["nonce"])})
        return self._json(404, {"error": "not_found"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--users", required=True, help="JSON file: username -> password, email, name, groups")
    args = parser.parse_args()
    with open(args.users) as f:
        users = json.load(f)
    issuer = f"http://127.0.0.1:{args.port}"
    Handler.provider = Provider(issuer, args.client_id, args.client_secret, users)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"oidc provider on {issuer}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
