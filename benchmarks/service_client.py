"""One client process of ``benchmarks/service.py``: it asks the query mix until told to stop.

Kept apart from the benchmark so that it imports nothing heavy (no dpcurator, pandas, numpy):
the client processes are started, import, connect and say ``ready`` before the measured window
opens, and spend their CPU on HTTP only. Protocol: arguments ``KIND URL TOKEN INDEX``; prints
``ready``; reads one line ``START STOP`` (Unix times) from stdin; asks queries until STOP and
prints one JSON line: the latencies of the requests sent after START, the costs of every
answered query, and the number of refusals or errors.
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import time
import urllib.parse
from typing import Any

import httpx

QUERIES = [
    "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex",
    "SELECT region, COUNT(*) AS n FROM people GROUP BY region",
    "SELECT education, COUNT(*) AS n FROM people GROUP BY education",
    "SELECT employed, COUNT(*) AS n FROM people GROUP BY employed",
    "SELECT sex, region, COUNT(*) AS n FROM people GROUP BY sex, region",
    "SELECT region, education, COUNT(*) AS n FROM people GROUP BY region, education",
    "SELECT sex, AVG(income) AS income FROM people GROUP BY sex",
    "SELECT region, AVG(income) AS income FROM people GROUP BY region",
    "SELECT education, AVG(income) AS income FROM people GROUP BY education",
    "SELECT region, SUM(hours) AS hours FROM people GROUP BY region",
    "SELECT sex, AVG(age) AS age FROM people GROUP BY sex",
    "SELECT education, AVG(age) AS age FROM people GROUP BY education",
    "SELECT region, COUNT(*) AS n FROM people WHERE age >= 65 GROUP BY region",
    "SELECT sex, COUNT(*) AS n FROM people WHERE employed GROUP BY sex",
    "SELECT education, AVG(income) AS income FROM people WHERE age < 30 GROUP BY education",
    "SELECT region, AVG(hours) AS hours FROM people WHERE employed GROUP BY region",
    "SELECT sex, SUM(income) AS income FROM people WHERE region = 'North' GROUP BY sex",
    "SELECT employed, AVG(age) AS age FROM people GROUP BY employed",
    "SELECT sex, COUNT(*) AS n, AVG(income) AS income FROM people GROUP BY sex",
    "SELECT region, COUNT(*) AS n FROM people WHERE income > 50000 GROUP BY region",
]


class _StdlibClient:
    """A minimal keep-alive HTTP/1.1 client (``http.client``) that reconnects when the server
    closes the connection."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parsed = urllib.parse.urlsplit(url)
        self._address = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self._headers = {**headers, "Content-Type": "application/json"}
        self._connection: http.client.HTTPConnection | None = None

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        if self._connection is None:
            self._connection = http.client.HTTPConnection(*self._address, timeout=30)
        self._connection.request("POST", path, json.dumps(body).encode(), self._headers)
        response = self._connection.getresponse()
        content = response.read()
        if response.will_close:
            self.close()
        return response.status, content

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class _HttpxClient:
    """The same requests through httpx (``--client httpx``)."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self._http = httpx.Client(base_url=url, headers=headers, timeout=30)

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        response = self._http.post(path, json=body)
        return response.status_code, response.content

    def close(self) -> None:
        self._http.close()


class _SocketClient:
    """HTTP/1.1 written and read on a plain socket (``--client socket``): a load generator in the
    manner of ``wrk``, spending next to no CPU on the cores it shares with the server.

    It sends complete requests (method, path, Host, Authorization, Content-Type, Content-Length,
    body) and reads each response's status line, headers and ``Content-Length`` body; it
    reconnects when the server answers ``Connection: close``. Enough for this server's JSON
    answers (always with a Content-Length), not a general client.
    """

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parsed = urllib.parse.urlsplit(url)
        self._address = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        lines = [f"Host: {parsed.netloc}", "Content-Type: application/json"]
        self._head = "\r\n".join([*lines, *(f"{k}: {v}" for k, v in headers.items())])
        self._socket: socket.socket | None = None
        self._buffer = b""

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        if self._socket is None:
            self._socket = socket.create_connection(self._address, timeout=30)
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._buffer = b""
        content = json.dumps(body).encode()
        request = f"POST {path} HTTP/1.1\r\n{self._head}\r\nContent-Length: {len(content)}\r\n\r\n"
        self._socket.sendall(request.encode() + content)
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            self._receive()
        status_line, *header_lines = self._buffer[:end].decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in header_lines)
        length = int(headers["content-length"])
        while len(self._buffer) < end + 4 + length:
            self._receive()
        answer = self._buffer[end + 4 : end + 4 + length]
        self._buffer = self._buffer[end + 4 + length :]
        if headers.get("connection") == "close":
            self.close()
        return int(status_line.split(" ", 2)[1]), answer

    def _receive(self) -> None:
        assert self._socket is not None
        chunk = self._socket.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection mid-response")
        self._buffer += chunk

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


CLIENTS = {"stdlib": _StdlibClient, "httpx": _HttpxClient, "socket": _SocketClient}


EPSILON = 0.001


def ask(kind: str, url: str, token: str, index: int) -> None:
    """Say ready, wait for the window, ask the mix from query ``index`` on; print the results."""
    http_client = CLIENTS[kind](url, {"Authorization": f"Bearer {token}"})
    latencies: list[float] = []
    costs: list[str] = []
    failed = 0
    try:
        print("ready", flush=True)
        start, stop = (float(x) for x in sys.stdin.readline().split())
        i = index
        while (now := time.time()) < stop:
            body = {"sql": QUERIES[i % len(QUERIES)], "epsilon": EPSILON}
            began = time.perf_counter()
            status, content = http_client.post("/v1/datasets/people/queries", body)
            elapsed = time.perf_counter() - began
            if status == 200:
                costs.append(json.loads(content)["cost"]["epsilon_exact"])
                if now >= start:
                    latencies.append(elapsed)
            else:
                failed += 1
            i += 1
    finally:
        http_client.close()
    print(json.dumps({"latencies": latencies, "costs": costs, "failed": failed}), flush=True)


if __name__ == "__main__":
    ask(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
