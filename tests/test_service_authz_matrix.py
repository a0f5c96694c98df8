"""Who may call what: every route of the HTTP API, with every kind of credential (issue 24, item 3).

One in-process server (uvicorn in a thread) on the demo dataset serves the whole module. Its
setup creates one resource of each kind: a published batch release, analyst A's query and fit
job (``Prefer: respond-async``), a private and a public synthetic release, a PMW mode, an owner's
count stream and density stream, a survey with reports; tokens to revoke are issued per request.
Sparse vector keeps no session (one request, one answer: no id to row), and analysts cannot
create streams, so there is no analyst's stream: ``POST .../streams`` is an owner route.

:data:`ROWS` declares, for each route (method and path template; some routes have a row per kind
of resource), the outcome for each credential:

* ``none`` (no ``Authorization`` header), ``bad`` (a real token id with a wrong secret);
* ``a``: analyst A, granted on the dataset, who created the fit job and holds the tokens revoked;
* ``b``: analyst B, granted nothing; ``g``: analyst G, granted on the dataset, creator of nothing;
* ``owner``: the owner who created every owner resource; ``owner2``: another owner.

Outcome classes (:func:`_outcome`): ``OK`` is a 2xx answer (every row sends a valid request: a
2xx proves the whole route, authorization included, let it through); ``401`` and ``403`` are
``unauthorized`` and ``forbidden`` problems; ``HIDDEN`` is a 404 ``not-found`` whose status,
type and detail are exactly those of the same request with unknown ids in the path (the caller
cannot tell the resource exists). A 404 that differs from the unknown-id answer is classed
``404 (leaks)``, and anything else by its status and problem type.

:func:`test_every_route_has_a_row` enumerates the app's routes, so a new route without a row
fails (as the privacy matrix's registry test fails for a new release kind).
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi.routing import iter_route_contexts

from dpcurator.service.app import create_app
from dpcurator.service.operations import CuratorService
from dpcurator.service.server import DEMO_DIR, bootstrap, build_service, demo_files, read_metadata
from tests.service_fixtures import ThreadServer, cheap_hasher

CREDENTIALS = ("none", "bad", "a", "b", "g", "owner", "owner2")
OK, UNAUTHORIZED, FORBIDDEN, HIDDEN = "OK", "401", "403", "HIDDEN"
DATASET = "demo"
_NUMBERS = itertools.count(1)


def expect(
    *,
    none: str = UNAUTHORIZED,
    bad: str = UNAUTHORIZED,
    a: str,
    b: str,
    g: str,
    owner: str = OK,
    owner2: str = OK,
) -> dict[str, str]:
    """The outcome per credential (no token and a bad token: 401 unless said otherwise)."""
    return {"none": none, "bad": bad, "a": a, "b": b, "g": g, "owner": owner, "owner2": owner2}


#: Anyone, with or without a token (a bad token too: these routes read no credentials).
PUBLIC = expect(none=OK, bad=OK, a=OK, b=OK, g=OK)
#: Any valid token; nothing is scoped (or the answer is scoped to the caller: /v1/me, lists).
ANY_TOKEN = expect(a=OK, b=OK, g=OK)
#: Owners only; analysts get 403 before any resource is looked up (so 403 reveals nothing).
OWNERS = expect(a=FORBIDDEN, b=FORBIDDEN, g=FORBIDDEN)
#: Whoever sees the dataset: owners and analysts granted on it; B is answered as for an
#: unknown dataset.
READERS = expect(a=OK, b=HIDDEN, g=OK)
#: The resource's creator (A) and owners; other analysts, granted or not, as for an unknown id.
CREATOR = expect(a=OK, b=HIDDEN, g=HIDDEN)
#: Routes about owner2's principal: owner2 themselves; the other owner as for an unknown id.
ANOTHER_OWNER = {**OWNERS, "owner": HIDDEN}
#: A private synthetic release; a public one (a bad token is still refused).
SYNTH_PRIVATE = {**READERS, "none": HIDDEN}
SYNTH_PUBLIC = {**PUBLIC, "bad": UNAUTHORIZED}
#: A stream: owners read every stream; analysts never see one (no grant of streams exists).
STREAM_READ = expect(a=HIDDEN, b=HIDDEN, g=HIDDEN)
#: Writing a stream (events, paid estimates) spends what its creator paid: only that owner.
STREAM_WRITE = expect(a=HIDDEN, b=HIDDEN, g=HIDDEN, owner2=FORBIDDEN)


@dataclass
class World:
    """The module's server, its credentials and the resources created in setup."""

    service: CuratorService
    server: ThreadServer
    tokens: dict[str, str | None]
    principals: dict[str, str]
    ids: dict[str, str] = field(default_factory=dict)
    clients: dict[str, httpx.Client] = field(default_factory=dict)

    def client(self, credential: str) -> httpx.Client:
        """The httpx client sending ``credential``'s token (none: no header)."""
        if credential not in self.clients:
            self.clients[credential] = self.server.client(self.tokens[credential])
        return self.clients[credential]

    def spare_token(self, credential: str) -> str:
        """A fresh token of ``credential`` (to be revoked by a row), its token id."""
        return self.service.authority.issue(self.principals[credential]).token_id


Value = Callable[[World, str], Any]


@dataclass(frozen=True)
class Row:
    """One route and kind of resource: the request and its outcome for each credential.

    ``ids`` maps a path parameter to the world's resource id (default: the parameter's own name
    in ``World.ids``) or to a function of (world, credential) making a fresh one; ``body`` is
    JSON or a function of (world, credential) making it (unique names per request).
    """

    method: str
    path: str
    expected: dict[str, str]
    variant: str = ""
    ids: Mapping[str, str | Value] = field(default_factory=dict)
    body: Any = None

    def url(self, world: World, credential: str, *, unknown: bool = False) -> str:
        """The path with its ids filled in (``unknown``: ids that exist nowhere)."""

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            if unknown:
                return _unknown(name)
            source = self.ids.get(name, name)
            return source(world, credential) if callable(source) else world.ids[source]

        return re.sub(r"\{(\w+)\}", fill, self.path)

    def json(self, world: World, credential: str) -> Any:
        """The request body."""
        return self.body(world, credential) if callable(self.body) else self.body


def _unknown(parameter: str) -> str:
    """An id of no resource, for the path parameter ``parameter``."""
    return f"zz-unknown-{parameter}"


def _unique(prefix: str) -> str:
    return f"{prefix}{next(_NUMBERS)}"


def _new_dataset(world: World, _credential: str) -> dict[str, Any]:
    data, metadata = demo_files()
    return {
        "id": _unique("reg"),
        "source": {"path": str(data)},
        "metadata": read_metadata(metadata),
        "cap_epsilon": 1,
    }


def _owner_token(world: World, _credential: str) -> str:
    return world.spare_token("owner")


def _a_token(world: World, _credential: str) -> str:
    return world.spare_token("a")


COUNT = "SELECT COUNT(*) AS n FROM people"
QUERY = {"sql": COUNT, "epsilon": 0.01}
FIT = {"model": "logistic", "response": "employed", "predictors": ["age"], "epsilon": 0.05,
       "coef_bound": 5, "method": "sample_and_aggregate"}  # fmt: skip
#: ε = 1, not less: at ε = 0.1 MWEM's multiplicative update overflowed now and then (a noisy
#: total near 1), and pytest turns numpy's RuntimeWarning into an error (reported, not ours).
SYNTH = {"kind": "mwem", "epsilon": 1, "columns": ["sex", "region"], "rows": 50}
PMW = {"epsilon": 0.1, "threshold": 5000, "max_updates": 5, "columns": ["sex"]}
SURVEY = {"categories": ["yes", "no"], "epsilon": 1}
GRANT = {"epsilon": 5, "delta": 1e-6}
SPARSE = {"queries": [COUNT], "threshold": 10, "epsilon": 0.01}

D = "/v1/datasets/{dataset_id}"
PRIVATE, PUBLISHED = {"release_id": "synthetic_private"}, {"release_id": "synthetic_public"}
TO_OWNER2 = {"analyst_id": "owner2_id"}

# fmt: off
ROWS: list[Row] = [
    # -- meta and static ------------------------------------------------------------------
    Row("GET", "/", PUBLIC),  # a redirect to the console (followed)
    Row("GET", "/v1/openapi.json", PUBLIC),
    Row("GET", "/console/{path}", PUBLIC),  # the console's static files
    Row("GET", "/v1/health", PUBLIC),
    Row("GET", "/v1/me", ANY_TOKEN),
    # -- datasets -------------------------------------------------------------------------
    Row("GET", "/v1/datasets", ANY_TOKEN),  # scoped: B's list is empty
    Row("POST", "/v1/datasets", OWNERS, body=_new_dataset),
    Row("GET", D, READERS),
    # Owners manage every dataset (a dataset has no creator in the ledger): owner2 too.
    Row("PATCH", D, OWNERS, body={"replay_enabled": True}),
    Row("GET", f"{D}/budget", READERS),
    # -- queries, fits, sparse vector, jobs ---------------------------------------------
    Row("POST", f"{D}/queries", READERS, body=QUERY),  # owners: charged to the cap
    Row("POST", f"{D}/queries:estimate", READERS, body=QUERY),
    Row("GET", f"{D}/queries", READERS),  # scoped: one's own entries (owners: all)
    Row("POST", f"{D}/fits", READERS, body=FIT),
    Row("POST", f"{D}/fits:estimate", READERS, body=FIT),
    Row("POST", f"{D}/sparse-vector", READERS, body=SPARSE),
    Row("GET", "/v1/jobs/{job_id}", CREATOR, variant="A's fit job"),
    Row("GET", "/v1/jobs", ANY_TOKEN),  # scoped: one's own jobs
    # -- published batch releases ---------------------------------------------------------
    Row("POST", f"{D}/releases", OWNERS, body={"name": "batch", "queries": [QUERY]}),
    Row("GET", f"{D}/releases", READERS),
    Row("GET", "/v1/releases/{release_id}", READERS),
    # -- synthetic releases ---------------------------------------------------------------
    Row("POST", f"{D}/synthetic:estimate", OWNERS, body=SYNTH),
    Row("POST", f"{D}/synthetic", OWNERS, body=SYNTH),
    Row("GET", f"{D}/synthetic", READERS),
    # A private release without a token is answered as unknown: these routes take no token for
    # public releases, so "no token" is not refused 401 before the look-up.
    Row("GET", "/v1/synthetic/{release_id}", SYNTH_PRIVATE, "private", ids=PRIVATE),
    Row("GET", "/v1/synthetic/{release_id}/data", SYNTH_PRIVATE, "private", ids=PRIVATE),
    # A public release: anyone, without a token (a bad token is still refused 401).
    Row("GET", "/v1/synthetic/{release_id}", SYNTH_PUBLIC, "public", ids=PUBLISHED),
    Row("GET", "/v1/synthetic/{release_id}/data", SYNTH_PUBLIC, "public", ids=PUBLISHED),
    # -- PMW: owners open a mode; whoever sees the dataset asks it, free --------------------
    Row("POST", f"{D}/pmw", OWNERS, body=PMW),
    Row("GET", "/v1/pmw/{mode_id}", READERS),
    Row("POST", "/v1/pmw/{mode_id}/queries", READERS, body={"where": {"sex": "F"}}),
    # -- streams: created by owners only (so there is no analyst's stream) ----------------
    Row("POST", f"{D}/streams", OWNERS, body={"kind": "count", "epsilon": 0.01, "horizon": 9}),
    Row("GET", "/v1/streams/{stream_id}", STREAM_READ, "owner's count stream"),
    Row("POST", "/v1/streams/{stream_id}/events", STREAM_WRITE, "owner's count stream",
        body={"values": [1, 0, 1]}),
    Row("POST", "/v1/streams/{stream_id}/estimates", STREAM_WRITE, "owner's density stream",
        ids={"stream_id": "density_stream"}),
    # -- surveys (local model: respondents are token holders; the estimates are free) -------
    Row("POST", "/v1/surveys", OWNERS, body=lambda w, c: {**SURVEY, "name": _unique("s")}),
    Row("GET", "/v1/surveys/{survey_id}", ANY_TOKEN),
    Row("POST", "/v1/surveys/{survey_id}/responses", ANY_TOKEN, body={"reports": [0, 1]}),
    Row("GET", "/v1/surveys/{survey_id}/estimates", ANY_TOKEN),
    # -- analysts, tokens, grants, audit (owners) ---------------------------------------
    Row("GET", "/v1/analysts", OWNERS),
    Row("POST", "/v1/analysts", OWNERS, body=lambda w, c: {"name": _unique("new")}),
    Row("POST", "/v1/analysts/{analyst_id}/tokens", OWNERS, "analyst G", body={}),
    Row("GET", "/v1/analysts/{analyst_id}/tokens", OWNERS, "analyst G"),
    Row("PUT", "/v1/analysts/{analyst_id}/grants/{dataset_id}", OWNERS, "analyst G", body=GRANT),
    Row("GET", "/v1/analysts/{analyst_id}/grants", OWNERS, "analyst G"),
    # The same routes on owner2's principal: owner2 themselves only (an owner who could mint or
    # list another owner's tokens could act as that owner, e.g. write that owner's streams).
    Row("POST", "/v1/analysts/{analyst_id}/tokens", ANOTHER_OWNER, "owner2", body={},
        ids=TO_OWNER2),
    Row("GET", "/v1/analysts/{analyst_id}/tokens", ANOTHER_OWNER, "owner2", ids=TO_OWNER2),
    # A grant is for analysts only: even owner2's own principal is not one.
    Row("PUT", "/v1/analysts/{analyst_id}/grants/{dataset_id}",
        {**OWNERS, "owner": HIDDEN, "owner2": HIDDEN}, "owner2", body=GRANT, ids=TO_OWNER2),
    Row("GET", "/v1/analysts/{analyst_id}/grants", ANOTHER_OWNER, "owner2", ids=TO_OWNER2),
    # Analysts revoke only their own tokens (anyone else's: as unknown); owners any token.
    Row("DELETE", "/v1/tokens/{token_id}", CREATOR, "A's token", ids={"token_id": _a_token}),
    Row("DELETE", "/v1/tokens/{token_id}", expect(a=HIDDEN, b=HIDDEN, g=HIDDEN),
        "the owner's token", ids={"token_id": _owner_token}),
    Row("GET", "/v1/audit", OWNERS),
    Row("GET", "/v1/ledger", OWNERS),
]
# fmt: on

#: Cells that fail for a known authorization bug in a file this test does not own: (method,
#: path, variant, credential) -> the reason (kept failing, visibly: xfail strict).
KNOWN_BUGS: dict[tuple[str, str, str, str], str] = {}


# -- the server and its resources ------------------------------------------------------------


def _join(prefix: str) -> None:
    """Wait for background threads whose name starts with ``prefix`` (jobs, releases)."""
    for thread in threading.enumerate():
        if thread.name.startswith(prefix):
            thread.join(timeout=60)


def _created(response: httpx.Response, status: int = 201) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("authz")
    service = build_service(
        f"sqlite:///{root / 'ledger.sqlite3'}",
        hasher=cheap_hasher(),
        data_root=DEMO_DIR,
        max_failures=10**6,  # the bad token is sent on every route: no 429 instead of 401
    )
    started = bootstrap(service, demo=True)
    assert started.owner_token is not None
    try:
        with ThreadServer(create_app(service)) as server:
            owner = server.client(started.owner_token)
            me = owner.get("/v1/me").json()
            tokens: dict[str, str | None] = {"none": None, "owner": started.owner_token}
            tokens["bad"] = f"dpc_{me['token_id']}_{'x' * 43}"
            principals = {"owner": me["id"]}
            for credential in ("a", "b", "g"):
                issued = _created(
                    owner.post("/v1/analysts", json={"name": f"analyst-{credential}"})
                )
                tokens[credential] = issued["token"]
                principals[credential] = issued["principal"]["id"]
                if credential != "b":
                    path = f"/v1/analysts/{issued['principal']['id']}/grants/{DATASET}"
                    assert owner.put(path, json=GRANT).status_code == 200
            other, issued2 = service.create_principal("owner2", "owner")
            tokens["owner2"], principals["owner2"] = issued2.token, other.id
            world = World(service, server, tokens, principals)
            world.ids = _resources(world, owner)
            yield world
            _join("job-")
            _join("synthetic-")
    finally:
        service.close()


def _resources(world: World, owner: httpx.Client) -> dict[str, str]:
    """Create one resource of each kind; their ids by path parameter name."""
    ids = {"dataset_id": DATASET, "analyst_id": world.principals["g"], "path": ""}
    ids["owner2_id"] = world.principals["owner2"]
    a = world.client("a")
    base = f"/v1/datasets/{DATASET}"
    assert a.post(f"{base}/queries", json=QUERY).status_code == 200
    job = _created(a.post(f"{base}/fits", json=FIT, headers={"Prefer": "respond-async"}), 202)
    ids["job_id"] = job["id"]
    batch = {"name": "published", "queries": [QUERY]}
    ids["release_id"] = _created(owner.post(f"{base}/releases", json=batch))["id"]
    for visibility in ("private", "public"):
        body = {**SYNTH, "public": visibility == "public"}
        published = _created(owner.post(f"{base}/synthetic", json=body), 202)
        ids[f"synthetic_{visibility}"] = published["id"]
    ids["mode_id"] = _created(owner.post(f"{base}/pmw", json=PMW))["id"]
    count = {"kind": "count", "epsilon": 0.01, "horizon": 10_000}
    ids["stream_id"] = _created(owner.post(f"{base}/streams", json=count))["id"]
    density = {"kind": "density", "epsilon": 0.01, "universe": 100, "output_epsilon": 0.01,
               "outputs": 4}  # fmt: skip
    ids["density_stream"] = _created(owner.post(f"{base}/streams", json=density))["id"]
    events = owner.post(f"/v1/streams/{ids['density_stream']}/events", json={"values": [1, 2]})
    assert events.status_code == 200, events.text
    survey = _created(owner.post("/v1/surveys", json={**SURVEY, "name": "first"}))
    ids["survey_id"] = survey["id"]
    reports = a.post(f"/v1/surveys/{survey['id']}/responses", json={"reports": [0, 1, 1]})
    assert reports.status_code == 200, reports.text
    _join("job-")
    _join("synthetic-")
    for visibility in ("private", "public"):
        release = owner.get(f"/v1/synthetic/{ids[f'synthetic_{visibility}']}").json()
        assert release["status"] == "done", release
    assert a.get(f"/v1/jobs/{ids['job_id']}").json()["status"] == "done"
    return ids


# -- sending a row and classing its answer ---------------------------------------------------


def _send(world: World, row: Row, credential: str, url: str) -> httpx.Response:
    return world.client(credential).request(
        row.method,
        url,
        json=row.json(world, credential),
        follow_redirects=True,
    )


def _problem(response: httpx.Response) -> tuple[int, str, str]:
    body = response.json()
    return response.status_code, str(body.get("type", "")), str(body.get("detail", ""))


def _outcome(world: World, row: Row, credential: str) -> str:
    """The outcome class of ``row`` sent with ``credential`` (see the module docstring)."""
    url = row.url(world, credential)
    response = _send(world, row, credential, url)
    status = response.status_code
    if 200 <= status < 300:
        return OK
    slug = str(response.json().get("type", "")).rsplit(":", 1)[-1]
    if status == 401 and slug == "unauthorized":
        assert response.headers["WWW-Authenticate"] == "Bearer"
        return UNAUTHORIZED
    if status == 403 and slug == "forbidden":
        return FORBIDDEN
    if status == 404 and slug == "not-found":
        got = _problem(response)
        unknown = _problem(_send(world, row, credential, row.url(world, credential, unknown=True)))
        # The detail names the id asked for: put the real ids in the unknown answer's detail.
        detail = unknown[2]
        for real, template in zip(url.split("/"), row.path.split("/"), strict=True):
            if template.startswith("{"):
                detail = detail.replace(repr(_unknown(template[1:-1])), repr(real))
        if got == (unknown[0], unknown[1], detail):
            return HIDDEN
        return f"404 (leaks: {got[2]!r} where an unknown id gets {unknown[2]!r})"
    return f"{status} {slug}: {response.text[:200]}"


def _cells() -> Iterator[Any]:
    for row in ROWS:
        for credential in CREDENTIALS:
            key = (row.method, row.path, row.variant, credential)
            name = (
                f"{row.method} {row.path}{f' [{row.variant}]' if row.variant else ''} {credential}"
            )
            marks = []
            if key in KNOWN_BUGS:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[key]))
            yield pytest.param(row, credential, id=name, marks=marks)


@pytest.mark.parametrize(("row", "credential"), list(_cells()))
def test_route_by_credential(world: World, row: Row, credential: str) -> None:
    assert _outcome(world, row, credential) == row.expected[credential]


# -- completeness ------------------------------------------------------------------------------


def _app_routes(app: Any) -> set[tuple[str, str]]:
    """Every (method, path) the app answers; HEAD (a GET without its body) is left out, and a
    mount stands for ``GET <mount>/{path}``."""
    found: set[tuple[str, str]] = set()
    for route in iter_route_contexts(app.routes):
        path, methods = str(route.path), route.methods
        if methods is None:  # a mount (the console's static files)
            found.add(("GET", f"{path}/{{path}}"))
            continue
        found |= {(method, path) for method in methods if method != "HEAD"}
    return found


def test_every_route_has_a_row(world: World) -> None:
    """A route added without a row here fails (and a row for a route gone fails too)."""
    declared = {(row.method, row.path) for row in ROWS}
    routes = _app_routes(create_app(world.service))
    assert routes - declared == set(), "routes without a row in ROWS"
    assert declared - routes == set(), "rows of routes the app does not have"
    for row in ROWS:
        assert set(row.expected) == set(CREDENTIALS), (row.method, row.path)


def test_lists_show_only_what_the_caller_may_see(world: World) -> None:
    """Routes open to any token answer each caller with their own part only."""
    b, g, a = world.client("b"), world.client("g"), world.client("a")
    assert b.get("/v1/datasets").json() == []
    assert DATASET in [d["id"] for d in g.get("/v1/datasets").json()]
    a_jobs = [job["id"] for job in a.get("/v1/jobs").json()]
    assert world.ids["job_id"] in a_jobs
    assert world.ids["job_id"] not in [job["id"] for job in g.get("/v1/jobs").json()]
    history = g.get(f"/v1/datasets/{DATASET}/queries").json()
    assert {entry["principal_id"] for entry in history} <= {world.principals["g"]}
