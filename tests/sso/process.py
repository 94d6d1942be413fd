"""Start the test OpenID Connect provider (``tests.sso.provider``) as its own process and point the portal's
settings at it. Used by the SSO tests (test client and browser)."""

import json
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID, CLIENT_SECRET = "rota", "rota-secret"


@contextmanager
def running_provider(port: int, users: dict, workdir: Path):
    """The provider on ``127.0.0.1:port`` with ``users`` until the block ends; yields its issuer URL."""
    issuer = f"http://127.0.0.1:{port}"
    users_file = workdir / "users.json"
    users_file.write_text(json.dumps(users))
    with (workdir / "idp.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tests.sso.provider", "--port", str(port), "--client-id",
                                 CLIENT_ID, "--client-secret", CLIENT_SECRET, "--users", str(users_file)], cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    requests.get(f"{issuer}/.well-known/openid-configuration", timeout=1).raise_for_status()
                    break
                except requests.RequestException:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the OIDC provider did not start (exit {proc.poll()})") from None
                    time.sleep(0.1)
            yield issuer
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def configure(settings, issuer: str) -> None:
    """Turn single sign-on on in ``settings`` (pytest-django's fixture) from the provider's discovery."""
    config = requests.get(f"{issuer}/.well-known/openid-configuration", timeout=5).json()
    settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = CLIENT_ID, CLIENT_SECRET
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = config["authorization_endpoint"]
    settings.OIDC_OP_TOKEN_ENDPOINT = config["token_endpoint"]
    settings.OIDC_OP_USER_ENDPOINT = config["userinfo_endpoint"]
    settings.OIDC_OP_JWKS_ENDPOINT = config["jwks_uri"]
    settings.ROTA_OIDC_ENABLED = True
