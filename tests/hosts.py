"""Hosts that share nothing, on one machine: each host is a network namespace of its own with
its own directory, and the hosts reach each other only through a switch (a bridge in a
namespace of its own), on addresses of a private /24 that exists nowhere else.  No traffic
leaves the machine; the root namespace gains no interface.  A host can be cut off from the
switch and healed, and every process started on a host, and every namespace, is gone at
the end.

Each host has its own name too (a UTS namespace).  A test process reaches a host's network
with :meth:`Host.entered`: sockets made inside the block live in the host's namespace (a
network namespace belongs to a thread), so an HTTP client or a database connection opened
there talks to the cluster as that host would.

Needs root (``ip netns``); :func:`available` says whether this machine can.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def available() -> bool:
    """Whether this machine can make network namespaces (root and the ``ip`` tool)."""
    return os.geteuid() == 0 and shutil.which("ip") is not None and Path("/proc/self/ns/net").exists()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _setns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


class Host:
    def __init__(self, network: Network, name: str, number: int, root: Path):
        self.network, self.name = network, name
        self.namespace = f"{network.prefix}-{name}"
        self.ip = f"{network.subnet}.{number}"
        self.dir = root / name  # the host's own disk: nothing under it is shared
        self.dir.mkdir(parents=True)
        self._link = f"to-{name}"[:15]  # the switch's end of the host's cable
        self.processes: list[subprocess.Popen] = []

    def _create(self) -> None:
        _ip("netns", "add", self.namespace)
        _ip("link", "add", self._link, "netns", self.network.switch, "type", "veth", "peer", "name", "eth0",
            "netns", self.namespace)
        _ip("-n", self.namespace, "addr", "add", f"{self.ip}/24", "dev", "eth0")
        _ip("-n", self.namespace, "link", "set", "lo", "up")
        _ip("-n", self.namespace, "link", "set", "eth0", "up")
        _ip("-n", self.network.switch, "link", "set", self._link, "master", "br0")
        _ip("-n", self.network.switch, "link", "set", self._link, "up")

    def _on_host(self, command: list[str]) -> list[str]:
        """``command`` in the host's network and with the host's own name (a UTS namespace:
        Celery names its workers after the host)."""
        return ["ip", "netns", "exec", self.namespace, "unshare", "--uts", "--", "sh", "-c",
                'hostname "$0" && exec "$@"', self.name, *command]

    def start(self, name: str, command: list[str], env: dict, cwd: Path | str | None = None) -> subprocess.Popen:
        """Run ``command`` on this host (its output in ``<dir>/<name>.log``)."""
        log = open(self.dir / f"{name}.log", "ab")
        proc = subprocess.Popen(self._on_host(command), env=env, cwd=cwd or self.dir,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        proc.log_path = self.dir / f"{name}.log"  # type: ignore[attr-defined]
        self.processes.append(proc)
        return proc

    def run(self, command: list[str], env: dict, cwd: Path | str | None = None, timeout: float = 300) -> str:
        """Run ``command`` on this host to its end; its output (raises on failure)."""
        done = subprocess.run(self._on_host(command), env=env, cwd=cwd or self.dir,
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} on {self.name} exited {done.returncode}:\n"
                               f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done.stdout

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)

    def stop(self, proc: subprocess.Popen) -> None:
        self.kill(proc, signal.SIGTERM) if proc.poll() is None else None
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill(proc)

    def cut(self) -> None:
        """Pull the host's cable: nothing reaches it or leaves it until :meth:`heal`."""
        _ip("-n", self.network.switch, "link", "set", self._link, "down")

    def heal(self) -> None:
        _ip("-n", self.network.switch, "link", "set", self._link, "up")

    @contextmanager
    def entered(self) -> Iterator[None]:
        """Sockets made in the block are this host's (this thread only)."""
        mine = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
        try:
            _setns(f"/var/run/netns/{self.namespace}")
            try:
                yield
            finally:
                if _libc.setns(mine, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "could not return to this thread's own network")
        finally:
            os.close(mine)


class Network:
    """A switch and the hosts on it, all removed by :meth:`close`."""

    def __init__(self, root: Path):
        tag = f"{os.getpid() % 100000:05d}"
        self.prefix = f"opd{tag}"
        self.subnet = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"
        self.switch = f"{self.prefix}-switch"
        self.root = root
        self.hosts: list[Host] = []
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")

    def add(self, name: str) -> Host:
        host = Host(self, name, len(self.hosts) + 1, self.root)
        try:
            host._create()
        except BaseException:
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
            raise
        self.hosts.append(host)
        return host

    def close(self) -> None:
        for host in self.hosts:
            for proc in host.processes:
                host.stop(proc)
        for host in self.hosts:
            # whatever a process left running in the namespace (a daemonised child) goes too
            pids = subprocess.run(["ip", "netns", "pids", host.namespace], capture_output=True, text=True).stdout
            for pid in pids.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.switch], capture_output=True)
