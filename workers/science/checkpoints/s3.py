"""A store that is a prefix of a bucket on an S3-compatible server (AWS, SeaweedFS, MinIO,
Ceph...), through boto3: the client MLflow's S3 artifact repository and vLLM's S3 model
loading use.  The server is ``S3_ENDPOINT_URL`` (AWS itself when unset), with the standard
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_DEFAULT_REGION``."""
from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from typing import BinaryIO, Iterator

from .files import LimitedReader, StoredFile, StoreUnavailable
from .uri import StoreURI, clean_key

#: Seconds to connect and to wait for a read: a store that hangs fails the call, it does not
#: hang the worker or the request.
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 60


@functools.lru_cache(maxsize=8)
def _client(endpoint: str, key_id: str, region: str, quick: bool):
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=1 if quick else CONNECT_TIMEOUT_S, read_timeout=2 if quick else READ_TIMEOUT_S,
                    retries={"max_attempts": 1 if quick else 3, "mode": "standard"}, s3={"addressing_style": "path"},
                    signature_version="s3v4")
    return boto3.session.Session().client("s3", endpoint_url=endpoint or None, region_name=region or "us-east-1",
                                          config=config)


def client(quick: bool = False):
    """The boto3 S3 client of this process's environment (one per endpoint and key);
    ``quick``: one try with short timeouts (a health check)."""
    return _client(os.environ.get("S3_ENDPOINT_URL", ""), os.environ.get("AWS_ACCESS_KEY_ID", ""),
                   os.environ.get("AWS_DEFAULT_REGION", ""), quick)


@contextmanager
def _reaching(uri) -> Iterator[None]:
    """Connection failures of the store, and its own errors (5xx: a store still starting
    after a restart answers InternalError for a while), as :class:`StoreUnavailable` (a
    fetch may try again later); refusals (no such bucket, wrong keys) as they are."""
    from botocore.exceptions import ClientError, ReadTimeoutError, ResponseStreamingError
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from urllib3.exceptions import HTTPError as Urllib3Error

    try:
        yield
    except (BotoConnectionError, ReadTimeoutError, ResponseStreamingError, Urllib3Error, ConnectionError) as exc:
        if isinstance(exc, StoreUnavailable):
            raise
        raise StoreUnavailable(f"the object store of {uri} is out of reach: {exc}") from exc
    except ClientError as exc:
        if _status(exc) < 500:
            raise
        raise StoreUnavailable(f"the object store of {uri} failed: {exc}") from exc


def _status(exc) -> int:
    return int(getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def ping(bucket: str | None = None) -> None:
    """Raises unless the store answers (and has ``bucket``), within about 3 seconds."""
    with _reaching(f"s3://{bucket or ''}"):
        if bucket:
            client(quick=True).head_bucket(Bucket=bucket)
        else:
            client(quick=True).list_buckets()


def _missing(exc) -> bool:
    code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound")


class S3Store:
    def __init__(self, uri: StoreURI):
        self.uri = uri
        self.bucket = uri.bucket

    def _key(self, key: str) -> str:
        return self.uri.child(key).path

    def list(self, prefix: str = "") -> list[StoredFile]:
        full = self._key(prefix)
        root = self.uri.path.rstrip("/")
        out: list[StoredFile] = []
        paginator = client().get_paginator("list_objects_v2")
        with _reaching(self.uri):
            for search in ([full] if not full else [full, full + "/"]):
                for page in paginator.paginate(Bucket=self.bucket, Prefix=search):
                    for obj in page.get("Contents", []):
                        key = obj["Key"]
                        if search == full and full and key != full:
                            continue  # the exact object only; the folder is the second search
                        if key.endswith("/"):
                            continue  # a folder marker some tools write
                        out.append(StoredFile(key[len(root):].lstrip("/") if root else key, int(obj["Size"])))
        return sorted(set(out), key=lambda f: f.key)

    @contextmanager
    def open(self, key: str) -> Iterator[BinaryIO]:
        from botocore.exceptions import ClientError

        try:
            with _reaching(self.uri):
                body = client().get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
        except ClientError as exc:
            if _missing(exc):
                raise FileNotFoundError(f"{self.uri.child(key)}: no such object") from None
            raise
        try:
            with _reaching(self.uri):  # a read that breaks off mid-file
                yield body
        finally:
            body.close()

    def write(self, key: str, stream: BinaryIO, *, max_bytes: int | None = None) -> int:
        if not clean_key(key):
            raise IsADirectoryError(f"{self.uri}: a file needs a key")
        reader = LimitedReader(stream, max_bytes)
        # upload_fileobj sends large files in parts and aborts the upload on an error, so the
        # object appears whole or not at all.
        with _reaching(self.uri):
            client().upload_fileobj(reader, self.bucket, self._key(key))
        return reader.count

    def delete(self, key: str) -> None:
        with _reaching(self.uri):
            client().delete_object(Bucket=self.bucket, Key=self._key(key))
