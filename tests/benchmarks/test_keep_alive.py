"""``harness.http_get``: a benchmark's keep-alive connection that the server closed while it
sat idle (daphne closes one after 60 s, as it did while bench_vs_mlflow.py measured MLflow's
export) is opened again, not an abort."""
from __future__ import annotations

import http.client
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from harness import http_get  # noqa: E402


class ClosesAfterEachAnswer(BaseHTTPRequestHandler):
    """Answers as a keep-alive HTTP/1.1 server would, then closes the connection, as a server
    does to a connection that has been idle too long."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"missing" if self.path == "/missing" else self.path.encode()
        self.send_response(404 if self.path == "/missing" else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ClosesAfterEachAnswer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_it_sends_again_on_a_new_connection_when_the_server_closed_the_idle_one(server):
    conn = http.client.HTTPConnection(server, timeout=10)
    assert http_get(conn, "/first", {}) == b"/first"
    assert http_get(conn, "/second", {}) == b"/second"  # the server closed the first connection
    assert http_get(conn, "/third", {}) == b"/third"
    conn.close()


def test_it_raises_on_an_answer_other_than_200(server):
    conn = http.client.HTTPConnection(server, timeout=10)
    with pytest.raises(RuntimeError, match="404"):
        http_get(conn, "/missing", {})
    conn.close()
