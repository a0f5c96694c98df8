"""Peer DP libraries for side-by-side benchmarks, in their own virtualenv.

Peers pin their own versions of numpy/polars/scikit-learn, so they live in ``.bench-venv/`` at the
repository root, created on first use from PyPI with the pinned versions below. Their timings are
taken by running a script inside that virtualenv (``peer_queries.py``), which prints JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEER_VENV = ROOT / ".bench-venv"
PEER_PYTHON = PEER_VENV / "bin" / "python"
PEER_REQUIREMENTS = (
    "opendp[polars]==0.16.0",
    "diffprivlib==0.6.6",
    "scikit-learn==1.7.2",  # diffprivlib 0.6.6 does not import with scikit-learn >= 1.8
)


def ensure_venv(path: Path, requirements: tuple[str, ...]) -> Path:
    """Create the virtualenv ``path`` with ``requirements`` if needed (idempotent: a stamp file
    records what was installed) and return its python executable."""
    python, stamp = path / "bin" / "python", path / ".peers-installed"
    wanted = "\n".join(requirements)
    if stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        print(f"creating {path} for the peer libraries ...", file=sys.stderr)
        venv.create(path, with_pip=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *requirements], check=True)
    stamp.write_text(wanted)
    return python


def ensure_peer_venv() -> Path:
    """Create the peers' virtualenv if needed and return its python executable."""
    return ensure_venv(PEER_VENV, PEER_REQUIREMENTS)


def run_peer_script(script: str, *args: str, timeout: float = 3600) -> dict[str, object]:
    """Run ``benchmarks/<script>`` in the peers' virtualenv and return the JSON it prints last."""
    python = ensure_peer_venv()
    completed = subprocess.run(
        [str(python), str(Path(__file__).with_name(script)), *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    result: dict[str, object] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result
