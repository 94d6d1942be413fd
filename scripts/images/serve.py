"""A small HTTP inference server, the demo's model service (in the image localhost/rota/serve:1 as
/opt/rota/serve.py). It listens on $ROTA_PORT (all addresses, or $ROTA_BIND) and answers:

  GET  /health        200 {"status": "ok"}  (what the node's probe asks: ROTA_HEALTH_PATH=/health)
  POST /v1/generate   {"prompt": "..."} -> {"completion": ..., "tokens": n, "replica": "<job name>"}
  GET  /              which replica this is

Its "model" reverses the prompt's words: enough to see every request reach a replica and come back."""

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPLICA = os.environ.get("ROTA_JOB_NAME", "replica")


class Handler(BaseHTTPRequestHandler):
    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self._answer(200, {"status": "ok"})
        return self._answer(200, {"replica": REPLICA, "endpoints": ["/health", "/v1/generate"]})

    def do_POST(self):
        if self.path != "/v1/generate":
            return self._answer(404, {"detail": f"no endpoint {self.path}"})
        try:
            prompt = str(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))["prompt"])
        except (ValueError, KeyError, TypeError):
            return self._answer(400, {"detail": 'send JSON {"prompt": "..."}'})
        words = prompt.split()
        return self._answer(200, {"completion": " ".join(reversed(words)), "tokens": len(words), "replica": REPLICA})

    def log_message(self, format, *args):  # one line per request in the job's log
        print(f"{self.address_string()} {format % args}", flush=True)


if __name__ == "__main__":
    server = ThreadingHTTPServer((os.environ.get("ROTA_BIND", "0.0.0.0"), int(os.environ["ROTA_PORT"])), Handler)
    print(f"{REPLICA} serving on port {server.server_port}", flush=True)
    server.serve_forever()
