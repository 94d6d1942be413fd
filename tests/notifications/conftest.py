"""A real SMTP server (aiosmtpd) and a real HTTP webhook receiver, both on loopback, started per test."""

import json
import threading
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiosmtpd.controller import Controller

SMTP_PORT = 8070
WEBHOOK_PORT = 8071


class _Inbox:
    def __init__(self):
        self.messages = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append({"to": list(envelope.rcpt_tos), "from": envelope.mail_from,
                              "message": message_from_bytes(envelope.content)})
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server(settings):
    """Mail sent through Django's SMTP backend lands in ``.messages``."""
    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=SMTP_PORT)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", SMTP_PORT
    yield inbox
    controller.stop()


class Receiver:
    """What the webhook receiver got (``.requests``: headers and raw body) and what it answers next."""

    def __init__(self):
        self.requests = []
        self.answers = []  # status codes to answer, in order; then 200
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{WEBHOOK_PORT}/hook"

    def bodies(self) -> list[dict]:
        return [json.loads(r["body"]) for r in self.requests if r["status"] == 200]


@pytest.fixture
def webhook_receiver(settings):
    settings.ROTA_WEBHOOK_ALLOW_PRIVATE = True
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with receiver.lock:
                status = receiver.answers.pop(0) if receiver.answers else 200
                receiver.requests.append({"headers": dict(self.headers), "body": body, "status": status})
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", WEBHOOK_PORT), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield receiver
    server.shutdown()
    server.server_close()
