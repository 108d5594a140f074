"""Where the client finds the server and its token: ``OPDWEB_URL`` and ``OPDWEB_TOKEN``
when set, else the file ``opdweb login`` wrote (``$OPDWEB_CONFIG_DIR`` or
``~/.config/opdweb``, ``credentials.json``, readable by its owner only: mode 0600)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from opdweb_client.transport import NotLoggedIn

FILE_NAME = "credentials.json"


@dataclass(frozen=True)
class Credentials:
    url: str  # the product's address, e.g. https://opd.example.com (no trailing slash)
    token: str  # an API token, opd_...


def config_dir() -> Path:
    configured = os.environ.get("OPDWEB_CONFIG_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "opdweb"


def credentials_path() -> Path:
    return config_dir() / FILE_NAME


def load_credentials(url: str | None = None, token: str | None = None) -> Credentials:
    """The credentials to use: those given, else the environment's, else the file's; a
    missing half is :class:`NotLoggedIn` saying how to give it."""
    url = url or os.environ.get("OPDWEB_URL")
    token = token or os.environ.get("OPDWEB_TOKEN")
    if not (url and token):
        stored = _read_file()
        url = url or stored.get("url")
        token = token or stored.get("token")
    if not url or not token:
        missing = " and ".join(n for n, v in (("a server URL", url), ("an API token", token)) if not v)
        raise NotLoggedIn(f"no credentials: {missing} missing. Run 'opdweb login URL' (with a token made on the "
                          "server's /tokens/ page), or set OPDWEB_URL and OPDWEB_TOKEN")
    return Credentials(url=url.rstrip("/"), token=token)


def save_credentials(credentials: Credentials) -> Path:
    """Write the file with mode 0600 from its first byte (never readable by others, even
    for a moment); its folder 0700."""
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{FILE_NAME}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"url": credentials.url, "token": credentials.token}, out)
        out.write("\n")
    os.chmod(tmp, 0o600)  # O_CREAT's mode is masked by the umask, and an old file keeps its own
    os.replace(tmp, path)
    return path


def _read_file() -> dict:
    path = credentials_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise NotLoggedIn(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise NotLoggedIn(f"{path} is not the JSON that 'opdweb login' writes; run 'opdweb login' again") from None
    return data if isinstance(data, dict) else {}
