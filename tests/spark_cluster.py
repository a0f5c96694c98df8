"""A real standalone Spark cluster on loopback for the tests: a master, two workers and a Spark
Connect server whose jobs run on them, all started from the pip ``pyspark`` package's own
``bin/spark-class`` and ``bin/spark-submit`` (Java 17).

Every daemon binds to 127.0.0.1 on a free port and keeps its work and log directories in one
temporary directory; :meth:`SparkCluster.stop` ends each JVM (SIGTERM, then SIGKILL) and waits
for it, so no process outlives the test session. The fixture ``spark_cluster`` starts one
cluster per test session (per xdist worker: the tests using it share an ``xdist_group``).

A Python process holds one classic SparkContext, and a Spark Connect session switches PySpark's
Column API to Connect for the whole process, so the drivers that query the cluster run in their
own processes (:mod:`tests.spark_cluster_driver`), as an owner's curator would.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKERS = 2
CORES = 2  # per worker: task slots (one per application using the cluster), not CPUs
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # short-lived JVMs: less start-up CPU
APP_CONF = {  # each application: one 1-core executor on each worker (so two share the cluster)
    "spark.driver.extraJavaOptions": JAVA_OPTIONS,
    "spark.executor.extraJavaOptions": JAVA_OPTIONS,
    "spark.cores.max": str(WORKERS),
    "spark.executor.cores": "1",
    "spark.executor.memory": "1g",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
}
START_TIMEOUT = 120.0  # seconds for the daemons to come up on a loaded 2-core machine
POLL = 0.1  # seconds between checks of a starting daemon (each a connect or a JSON request)
EXIT_GRACE = 20.0  # seconds for executors to exit after their worker
DRIVER_TIMEOUT = 900.0  # seconds for the drivers' checks (a hang: they take minutes at most)
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
CONNECT_APP = "dpcurator-connect"  # the application names the master lists
CLASSIC_APP = "dpcurator-cluster-tests"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 now (all held open while they are picked,
    so the OS cannot hand the same one out twice)."""
    probes = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package."""
    import pyspark  # noqa: PLC0415  (optional dependency)

    return Path(pyspark.__file__).resolve().parent


@dataclass
class SparkCluster:
    """A running standalone cluster (see the module docstring); use :func:`start_cluster`."""

    root: Path
    master_port: int
    ui_port: int
    connect_port: int
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        """The URL a classic driver passes to ``SparkSession.builder.master``."""
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def connect_url(self) -> str:
        """The URL a Spark Connect client passes to ``SparkSession.builder.remote``."""
        return f"sc://127.0.0.1:{self.connect_port}"

    def env(self) -> dict[str, str]:
        """The environment of the daemons and the drivers: loopback only, this venv's Python."""
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOCAL_HOSTNAME="127.0.0.1",
            SPARK_LOG_DIR=str(self.root / "logs"),
            SPARK_WORKER_DIR=str(self.root / "work"),
            SPARK_LOCAL_DIRS=str(self.root / "local"),
            SPARK_DAEMON_JAVA_OPTS=JAVA_OPTIONS,
            # no REST submission server: its fixed port 6066 clashed between concurrent clusters
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
        )
        for inherited in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "MASTER"):
            env.pop(inherited, None)
        return env

    def launch(
        self, name: str, program: str, *args: str, env: dict[str, str] | None = None
    ) -> None:
        """Start one process (a Spark script by name, or a path) in its own process group, its
        output in ``logs/<name>.log``."""
        log = (self.root / "logs" / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [program if os.sep in program else str(spark_home() / "bin" / program), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env() if env is None else env,
            cwd=self.root,
            start_new_session=True,
        )
        log.close()  # the child keeps its own descriptor
        self.processes.append(process)

    def master_state(self) -> dict[str, Any]:
        """The master's state (its web UI's JSON: workers, active and completed applications)."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as answer:
            state: dict[str, Any] = json.load(answer)
            return state

    def alive_workers(self) -> int:
        """The number of ALIVE workers registered with the master."""
        workers = self.master_state().get("workers", [])
        return sum(1 for worker in workers if worker.get("state") == "ALIVE")

    def wait(self, ready: str, check: object) -> None:
        """Poll ``check()`` until true; fail with the daemons' logs if a daemon dies or time
        runs out."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            dead = [p for p in self.processes if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a Spark daemon exited ({dead[0].args!r}):\n{self.logs()}")
            try:
                if check():  # type: ignore[operator]
                    return
            except OSError:
                pass  # not listening yet
            time.sleep(POLL)
        raise RuntimeError(f"Spark cluster not {ready} after {START_TIMEOUT} s:\n{self.logs()}")

    def wait_for_connect(self) -> None:
        """Return once the Connect server (started by :func:`start_cluster`) answers."""
        self.wait("serving Connect", lambda: _port_open(self.connect_port))

    def logs(self) -> str:
        """The tail of every daemon's log (for failure messages)."""
        tails = []
        for path in sorted((self.root / "logs").glob("*.log")):
            tails.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(tails)

    def stop(self) -> None:
        """End every daemon (Connect server first, master last) and wait for each JVM.

        Raises:
            RuntimeError: if a process working in the cluster's directory (an executor a worker
                started) outlives them by :data:`EXIT_GRACE` seconds (it is then killed).
        """
        for process in reversed(self.processes):
            _end(process)
        self.processes.clear()
        deadline = time.monotonic() + EXIT_GRACE
        while (left := processes_in(self.root)) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if left:
            raise RuntimeError(f"Spark processes {left} outlived the cluster's daemons")


def processes_in(root: Path) -> list[int]:
    """The processes working in ``root`` or below: the daemons (started there) and the
    executors the workers start in their work directories."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:  # gone, or not ours to read
            continue
        if cwd == root or root in cwd.parents:
            found.append(int(entry.name))
    return found


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)
    else:  # the JVM is gone; end anything left in its group (none expected)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


#: The master's log line naming the port a service bound.
_BOUND = re.compile(r"Successfully started service '(\w+)' on port (\d+)")


def _bound_ports(log: Path) -> dict[str, int]:
    """The ports the master's named services bound, from its log so far."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return {name: int(port) for name, port in _BOUND.findall(text)}


def _port_open(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return True


def start_cluster(root: Path, *, worker_memory: str = "2g", connect: bool = True) -> SparkCluster:
    """Start a master and :data:`WORKERS` workers on loopback (and a Spark Connect
    server running its jobs on them), returning once every worker is registered and the
    Connect server is launched: its JVM comes up while a classic driver's does
    (:meth:`SparkCluster.wait_for_connect` before using it). Stops whatever it started if any
    part fails."""
    root = root.resolve()
    for sub in ("logs", "work", "local"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    cluster = SparkCluster(root, *free_ports(3))
    try:
        master = "org.apache.spark.deploy.master.Master"
        cluster.launch(
            "master", "spark-class", master, "--host", "127.0.0.1",
            "--port", str(cluster.master_port), "--webui-port", str(cluster.ui_port),
        )  # fmt: skip
        # Spark moves a service whose port another process took meanwhile to the next one: the
        # ports are read from the master's log, else the master's JSON state could be read from
        # whatever holds the port picked here (a worker's HTML page was seen)
        bound: dict[str, int] = {}

        def master_bound() -> bool:
            bound.update(_bound_ports(root / "logs" / "master.log"))
            return {"sparkMaster", "MasterUI"} <= bound.keys()

        cluster.wait("bound", master_bound)
        cluster.master_port, cluster.ui_port = bound["sparkMaster"], bound["MasterUI"]
        # the web UI too: a worker's free port picked before it bound could be the UI's
        cluster.wait("up", lambda: _port_open(cluster.master_port) and _port_open(cluster.ui_port))
        for index in range(WORKERS):
            cluster.launch(
                f"worker{index}", "spark-class", "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--port", str(free_port()),
                "--webui-port", str(free_port()), "--cores", str(CORES), "--memory", worker_memory,
                "--work-dir", str(root / "work"), cluster.master_url,
            )  # fmt: skip
        # the Connect server once both workers are registered: the master places an application's
        # executors on the workers alive when it registers, and one on each is the design (APP_CONF)
        cluster.wait("registered", lambda: cluster.alive_workers() == WORKERS)
        if connect:
            cluster.launch(
                "connect", "spark-submit", "--class", CONNECT_CLASS,
                "--name", CONNECT_APP, "--master", cluster.master_url,
                *_conf(
                    {
                        "spark.connect.grpc.binding.address": "127.0.0.1",
                        "spark.connect.grpc.binding.port": str(cluster.connect_port),
                        "spark.driver.memory": "1g",
                        **APP_CONF,
                    }
                ),
            )  # fmt: skip
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _conf(settings: dict[str, str]) -> list[str]:
    return [arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")]


def run_drivers(cluster: SparkCluster, modes: tuple[str, ...]) -> dict[str, object]:
    """Run :mod:`tests.spark_cluster_driver` once per mode ("classic": a driver of the master;
    "connect": a client of the Connect server), concurrently, and return what each pickled.
    Fails with a driver's output and the daemons' logs if a driver fails or overruns
    :data:`DRIVER_TIMEOUT`."""
    env = cluster.env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    running = {}
    try:
        for mode in modes:  # a classic driver starts while the Connect server may still start
            if mode == "classic":
                url = cluster.master_url
            else:
                cluster.wait_for_connect()
                url = cluster.connect_url
            output = cluster.root / f"driver-{mode}.pickle"
            # in the cluster's directory, so that stop() also sees a driver JVM left behind
            cluster.launch(
                f"driver-{mode}",
                sys.executable, "-m", "tests.spark_cluster_driver", mode, url, str(output),
                env=env,
            )  # fmt: skip
            running[mode] = (cluster.processes.pop(), output)
    except BaseException:
        for process, _ in running.values():
            _end(process)
        raise
    deadline = time.monotonic() + DRIVER_TIMEOUT
    results = {}
    for mode, (process, output) in running.items():
        try:
            code = process.wait(timeout=max(deadline - time.monotonic(), 1.0))
        except subprocess.TimeoutExpired:
            code = None
        if code != 0:
            for other, _ in running.values():
                _end(other)
            pytest.fail(f"the {mode} driver failed ({code}):\n{cluster.logs()}")
        with output.open("rb") as handle:
            results[mode] = pickle.load(handle)  # written by our own driver just now
    return results
