"""One contract for every store (workers/science/checkpoints/stores.py), held by a local
directory and by a real S3 store (SeaweedFS, started by the product's own code): what is
written is listed and read back byte for byte, a write is whole or not at all, no key leads
out of the store's root, a prefix lists only what is below it, and a store that is down
fails within its timeouts as :class:`StoreUnavailable`."""
from __future__ import annotations

import io
import os
import threading
import time

import pytest

from workers.science.checkpoints import s3
from workers.science.checkpoints.files import StoredFile, StoreUnavailable, TooLarge
from workers.science.checkpoints.stores import store_at
from workers.science.checkpoints.uri import BadURI, parse


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "store" / "root")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/root"


def write(store, key: str, data: bytes, **kw) -> int:
    return store.write(key, io.BytesIO(data), **kw)


def read(store, key: str) -> bytes:
    with store.open(key) as fh:
        return fh.read()


def test_what_is_written_is_listed_and_read_back(root):
    store = store_at(root)
    payload = os.urandom(3 * 2**20 + 17)  # more than one multipart part on S3
    assert write(store, "model/weights.safetensors", payload) == len(payload)
    assert write(store, "model/config.json", b"{}") == 2
    assert write(store, "notes.txt", b"x") == 1
    assert store.list() == [StoredFile("model/config.json", 2), StoredFile("model/weights.safetensors", len(payload)),
                            StoredFile("notes.txt", 1)]
    assert read(store, "model/weights.safetensors") == payload
    assert store_at(root + "/model").list() == [StoredFile("config.json", 2),
                                                StoredFile("weights.safetensors", len(payload))]


def test_a_prefix_lists_only_what_is_below_it(root):
    store = store_at(root)
    write(store, "a/b/file", b"1")
    write(store, "a/bc/file", b"22")
    assert store.list("a/b") == store.list("a/b/") == [StoredFile("a/b/file", 1)]
    assert store_at(root + "/a/b").list() == [StoredFile("file", 1)]
    assert store_at(root + "/a/bc").list() == [StoredFile("file", 2)]
    assert store_at(root + "/a/none").list() == [] and store.list("a/none") == []


def test_an_overwrite_replaces_and_a_delete_removes(root):
    store = store_at(root)
    write(store, "f", b"first")
    write(store, "f", b"second!")
    assert read(store, "f") == b"second!" and store.list() == [StoredFile("f", 7)]
    store.delete("f")
    store.delete("f")  # twice: nothing to do
    assert store.list() == []
    with pytest.raises(FileNotFoundError):
        read(store, "f")


def test_a_write_past_its_limit_keeps_nothing(root):
    store = store_at(root)
    write(store, "kept", b"old")
    with pytest.raises(TooLarge, match="limit of 1000 bytes"):
        write(store, "big", os.urandom(6 * 2**20), max_bytes=1000)
    with pytest.raises(TooLarge):
        write(store, "kept", b"y" * 1001, max_bytes=1000)
    assert store.list() == [StoredFile("kept", 3)] and read(store, "kept") == b"old"


class SlowStream(io.RawIOBase):
    """Gives ``total`` bytes slowly, so a reader can look while the write goes on."""

    def __init__(self, total: int):
        self.left = total

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.left, 2**16)
        time.sleep(0.01)
        buffer[:n] = b"z" * n
        self.left -= n
        return n


def test_a_reader_never_sees_half_a_file(root):
    store = store_at(root)
    total = 2 * 2**20
    writer = threading.Thread(target=store.write, args=("growing", io.BufferedReader(SlowStream(total))))
    writer.start()
    seen = set()
    while writer.is_alive():
        seen.update(f.size for f in store.list() if f.key == "growing")
        time.sleep(0.02)
    writer.join()
    assert seen <= {total} and store.list() == [StoredFile("growing", total)]


@pytest.mark.parametrize("key", ["../escape", "a/../../escape", "a\\b", "a\x00b", "a\nb"])
def test_no_key_leads_out_of_the_root(root, key):
    store = store_at(root)
    with pytest.raises(BadURI):
        write(store, key, b"x")
    with pytest.raises(BadURI):
        read(store, key)
    assert store.list() == []


def test_a_key_with_a_leading_slash_is_still_below_the_root(root, tmp_path):
    store = store_at(root)
    write(store, "/etc/passwd", b"mine")
    assert store.list() == [StoredFile("etc/passwd", 4)] and read(store, "etc/passwd") == b"mine"


def test_a_bucket_and_prefix_are_exactly_what_the_uri_says():
    assert parse("s3://bucket-a/x/y") == parse("s3://bucket-a/x/y/")
    assert not parse("s3://bucket-a/x").contains(parse("s3://bucket-a/xy"))
    assert not parse("s3://bucket-a/x").contains(parse("s3://bucket-b/x"))
    for bad in ("s3://user:pw@bucket/x", "s3://bucket:9000/x", "s3://BUCKET/x", "s3://b/x", "s3://bucket/x?y=1",
                "s3://bucket/../other", "http://bucket/x"):
        with pytest.raises(BadURI):
            parse(bad)


def test_a_store_that_is_down_fails_fast_as_unavailable(s3_server, s3_bucket, monkeypatch):
    monkeypatch.setenv("S3_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    s3._client.cache_clear()
    store = store_at(f"s3://{s3_bucket}/root")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="out of reach"):
        store.list()
    with pytest.raises(StoreUnavailable):
        s3.ping()
    assert time.monotonic() - started < 60  # connect timeouts and retries, never a hang


def _answering(status: int, code: str):
    """An HTTP server that answers every request with S3's error document ``code``: a store
    failing (5xx) or refusing (4xx) in a way a real one cannot be made to on demand."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = f'<?xml version="1.0"?><Error><Code>{code}</Code><Message>{code}</Message></Error>'.encode()

    class Answer(BaseHTTPRequestHandler):
        def _answer(self):
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_PUT = do_HEAD = do_POST = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize(("status", "code", "unavailable"), [
    (500, "InternalError", True), (503, "SlowDown", True), (403, "AccessDenied", False)])
def test_a_store_that_fails_is_unavailable_and_one_that_refuses_is_not(monkeypatch, status, code, unavailable):
    from botocore.exceptions import ClientError

    server = _answering(status, code)
    try:
        monkeypatch.setenv("S3_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
        s3._client.cache_clear()
        store = store_at("s3://bucket/root")
        with pytest.raises(StoreUnavailable if unavailable else ClientError, match=code):
            with store.open("model.safetensors") as fh:
                fh.read()
        with pytest.raises(StoreUnavailable if unavailable else ClientError, match=code):
            store.list()
    finally:
        server.shutdown()
        s3._client.cache_clear()
