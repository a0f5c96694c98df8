"""Owners register only regular data files under the data root, and registration errors never
show what a file holds."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from dpcurator.errors import DomainError, ParameterError
from dpcurator.service.curator import Catalog
from tests.service_fixtures import PEOPLE_METADATA, LiveServer, write_people

SECRET = "hunter2-secret-header"
METADATA = {"table": "t", "columns": {"x": {"type": "int", "lower": 0, "upper": 10}}}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A data root holding ``t.csv``, next to an outside directory holding ``secret.csv``."""
    inside = tmp_path / "root"
    inside.mkdir()
    (inside / "t.csv").write_text("x\n1\n7\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.csv").write_text(f"{SECRET},x\n1,2\n")
    return inside


def test_only_regular_files_under_the_root_are_opened(root: Path) -> None:
    """Missing, outside, escaping by '..' or by a symbolic link, a directory, a device, a wrong
    suffix: one refusal text for all (no oracle of what exists)."""
    outside = root.parent / "outside" / "secret.csv"
    (root / "link.csv").symlink_to(outside)
    (root / "passwd.csv").symlink_to("/etc/passwd")
    (root / "dir.csv").mkdir()
    (root / "t.txt").write_text("x\n1\n")
    catalog = Catalog(data_root=root)
    refused = [
        str(root / "missing.csv"),
        str(outside),
        str(root / ".." / "outside" / "secret.csv"),
        str(root / "link.csv"),
        str(root / "passwd.csv"),
        str(root / "dir.csv"),
        "/dev/null.csv",
        str(root / "t.txt"),
        "",
    ]
    messages = set()
    for path in refused:
        with pytest.raises(ParameterError) as caught:
            catalog.check({"path": path}, METADATA)
        messages.add(str(caught.value))
    assert len(messages) == 1
    (root / "alias.csv").symlink_to(root / "t.csv")  # a link that stays inside is fine
    for name in ("t.csv", "alias.csv"):
        _, backend = catalog.check({"path": str(root / name)}, METADATA)
        backend.close()


def test_without_a_root_nothing_is_registered(root: Path) -> None:
    with pytest.raises(ParameterError, match="--data-root"):
        Catalog().check({"path": str(root / "t.csv")}, METADATA)


def test_registration_errors_show_nothing_of_the_file(root: Path) -> None:
    (root / "s.csv").write_text(f"{SECRET},y\n1,2\n")
    with pytest.raises(DomainError) as caught:
        Catalog(data_root=root).check({"path": str(root / "s.csv")}, METADATA)
    assert SECRET not in str(caught.value)
    assert "'x'" in str(caught.value)  # what the owner declared is named


def test_the_served_api_refuses_files_outside_the_data_root(tmp_path: Path) -> None:
    """``serve --data`` makes the data's directory the root: a link to /etc/passwd elsewhere and
    a file under the root with a secret header are refused without their contents."""
    data = tmp_path / "data"
    data.mkdir()
    csv = write_people(data / "people.csv")
    meta = tmp_path / "people.json"
    meta.write_text(json.dumps(PEOPLE_METADATA), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink("/etc/passwd", elsewhere / "passwd.csv")
    (data / "s.csv").write_text(f"{SECRET},y\n1,2\n")
    args = ["--data", str(csv), "--metadata", str(meta), "--ledger", f"sqlite:///{tmp_path}/l.db"]
    server = LiveServer(args).start(wait_lines=1)
    try:
        owner_token = server.first_lines[0].removeprefix("owner token: ")
        headers = {"Authorization": f"Bearer {owner_token}"}
        with httpx.Client(base_url=server.url, headers=headers) as owner:
            answers = [
                owner.post(
                    "/v1/datasets",
                    json={
                        "id": f"d{i}",
                        "source": {"path": str(path)},
                        "metadata": METADATA,
                        "cap_epsilon": 1,
                    },
                )
                for i, path in enumerate((elsewhere / "passwd.csv", data / "s.csv"))
            ]
    finally:
        server.stop()
    assert [a.status_code for a in answers] == [422, 422]
    assert "data root" in answers[0].json()["detail"]
    assert SECRET not in answers[1].text
    assert "'x'" in answers[1].json()["detail"]
