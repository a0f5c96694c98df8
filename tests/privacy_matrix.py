"""The conformance matrix of issue 29: every release kind × relation × unit, by brute force.

For one release kind, one neighbouring relation (add/remove, replace-one) and one unit (a row,
r = 2 rows a person without an id, a person column with r = 2 and g = 2), :func:`audit` opens a
tiny table and each of its worst-case neighbours (:func:`neighbours`) in a fresh session, runs the
release on both with the SAME seed and records, through a tap on the mechanisms, the exact input
of every noise draw and selection (:class:`Tap`). Because the noise of an additive mechanism does
not depend on its input, the two runs draw the same noise; the recorded inputs then give each
mechanism's privacy loss on that pair of tables exactly:

* discrete Laplace of scale b on integers (or on a float grid): ‖x − x'‖₁ / b (ε);
* discrete Gaussian of σ: ‖x − x'‖₂² / (2σ²) (ρ);
* permute-and-flip / the exponential mechanism at ε for scores of sensitivity Δ:
  ε·‖s − s'‖∞ / Δ (ε), and for zCDP accounting its bounded-range ρ, (that ε)²/8;
* one run of AboveThreshold (sparse vector) at ε for answers of sensitivity Δ, recorded as
  one draw (its noisy threshold) holding every answer the run tested, on the mechanism's own
  grid (u = its grid sensitivity, floor(Δ/2^k) + 1 steps): ε·‖a − a'‖∞ / u (ε), and ε²/2 of
  ρ. The rule: the run is ε-DP for answers that move by at most u steps (Lyu, Su & Li 2017,
  Theorem 2, with threshold noise 2u/ε and query noise 4u/ε); answers that move by at most
  m steps face the same noise as the mechanism for sensitivity m at ε·m/u, so the pair's loss
  is at most ε·m/u — a safe bound, not the exact loss (AboveThreshold's loss is not additive
  in its inputs).

Each mechanism built by ``Laplace.for_epsilon(_floats)`` or ``Gaussian.for_rho(_squared)`` is
also checked alone: its input must not move more than the sensitivity it was calibrated for (a
release with slack elsewhere could otherwise hide one miscalibrated draw).

The sum over the mechanisms of a release (basic composition, up to the first point where the two
runs ask different questions) must not exceed the release's charge (read from the session's
filter): a sensitivity the plan got wrong for this relation or unit shows up as a loss above the
charge. The registry :data:`KINDS` names every release kind; ``tests/test_privacy_matrix.py``
fails when a kind the library offers has no row.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpcurator as dpc
from dpcurator.accounting import PrivacyFilter, ZCDPAccountant
from dpcurator.core.measures import ZCDP, ApproxDP, PureDP
from dpcurator.errors import UnsupportedQueryError
from dpcurator.estimators import noisy_wide, regression
from dpcurator.mechanisms import AboveThreshold, Gaussian, Laplace
from dpcurator.mechanisms._grid import to_grid
from dpcurator.mechanisms.exponential import PermuteAndFlip
from dpcurator.mechanisms.sparse_vector import AboveThresholdRun
from dpcurator.random import SeededRng

RELATIONS = ("add_remove", "replace_one")
#: One seed for every pair: D's adaptive choices (e.g. MST's compression) are then the same
#: against every neighbour, so the spread newcomer meets them.
SEED = 1000
LEVELS = ("row", "rows", "person")

#: The columns of the tiny tables: two keyed categories, a bounded float, a 0/1 label.
G_KEYS = ("a", "b", "c", "d")
H_KEYS = ("u", "v", "w", "z")


def metadata(relation: str, level: str, persons: int) -> dpc.Metadata:
    """The tiny table's metadata for a relation and a unit level."""
    columns: dict[str, Any] = {
        "g": {"type": "string", "keys": list(G_KEYS)},
        "h": {"type": "string", "keys": list(H_KEYS)},
        "x": {"type": "float", "lower": 0.0, "upper": 10.0},
        "y": {"type": "int", "lower": 0, "upper": 1, "keys": [0, 1]},
    }
    data: dict[str, Any] = {"table": "t", "columns": columns}
    if level == "person":
        columns["pid"] = {"type": "int"}
        data.update(person_column="pid", max_rows_per_person=2, max_groups_per_person=2)
    elif level == "rows":
        data.update(max_rows_per_person=2)
    if relation == "replace_one":
        data.update(neighbouring="replace_one", public_size=persons)
    return dpc.Metadata.from_dict(data)


Row = tuple[str, str, float, int]

#: The base table's persons (each a list of rows g, h, x, y): mostly common cells, so MST's
#: compression keeps a/u and b/v and merges c, d and w, z; the persons removed or replaced
#: (0 and 3) each own a row at the upper bound of x.
BASE: tuple[tuple[Row, ...], ...] = tuple(
    ((g, h, x, y),) for g, h, x, y in [
        ("a", "u", 10.0, 0), ("a", "u", 2.5, 1), ("a", "v", 4.0, 0), ("b", "v", 10.0, 1),
        ("b", "u", 8.0, 1), ("b", "v", 9.5, 0), ("a", "u", 10.0, 1), ("b", "v", 7.0, 0),
    ]
)  # fmt: skip


def _newcomers(level: str) -> tuple[tuple[Row, ...], ...]:
    """The persons that join or replace: extremes of every column, one cell or spread over as
    many cells as the unit lets one person own (more than the bound, under user level)."""
    rows = {"row": 1, "rows": 2, "person": 5}[level]
    low = tuple(("a", "u", 0.0, 0) for _ in range(rows))
    high = tuple(("d", "z", 10.0, 1) for _ in range(rows))
    # user level: r = 2 rows in each of two rare cells (and one more), so a merge of rare codes
    # (MST's compression) can put g·r of the bounded rows into one cell
    cells = [("c", "w"), ("c", "w"), ("d", "z"), ("d", "z"), ("c", "z")] if rows > 2 else [
        ("c", "w"), ("d", "z"),
    ]  # fmt: skip
    spread = tuple((g, h, 10.0, 1) for g, h in cells[:rows])
    return (low, high, spread)


def _base(level: str) -> tuple[tuple[Row, ...], ...]:
    """The base persons for a level: one row each, or pairs of rows a person when r > 1."""
    if level == "row":
        return BASE
    rows = [r for person in BASE for r in person]
    return tuple(tuple(rows[i : i + 2]) for i in range(0, len(rows), 2))


def frame(
    persons: tuple[tuple[Row, ...], ...], level: str, pids: tuple[int, ...] | None = None
) -> pd.DataFrame:
    """The table of ``persons`` (a ``pid`` column under user level: ``pids``, by default the
    persons' positions)."""
    ids = tuple(range(len(persons))) if pids is None else pids
    records = []
    for pid, person in zip(ids, persons, strict=True):
        for g, h, x, y in person:
            record: dict[str, Any] = {"g": g, "h": h, "x": x, "y": y}
            if level == "person":
                record["pid"] = pid
            records.append(record)
    columns = ["g", "h", "x", "y"] + (["pid"] if level == "person" else [])
    return pd.DataFrame.from_records(records, columns=columns)


#: The person id of a newcomer (every base person keeps its own id in every neighbour).
NEWCOMER_ID = 100


def neighbours(relation: str, level: str) -> Iterator[tuple[pd.DataFrame, pd.DataFrame]]:
    """Pairs (D, D') of neighbouring tables: add/remove — a newcomer added, or a base person
    removed; replace-one — a base person replaced by a newcomer (the table size unchanged). Every
    other person keeps its rows and its id."""
    base = _base(level)
    ids = tuple(range(len(base)))
    table = frame(base, level)
    newcomers = _newcomers(level)
    if relation == "add_remove":
        for person in newcomers:
            yield table, frame((*base, person), level, (*ids, NEWCOMER_ID))
        for i in (0, 3):
            yield table, frame(base[:i] + base[i + 1 :], level, ids[:i] + ids[i + 1 :])
        return
    for i, person in itertools.product((0, 3), newcomers):
        replaced = (*ids[:i], NEWCOMER_ID, *ids[i + 1 :])
        yield table, frame((*base[:i], person, *base[i + 1 :]), level, replaced)


# ----------------------------------------------------------------------------------------------
# The tap on the mechanisms


@dataclass
class Draw:
    """One mechanism invocation: its kind (``laplace``, ``gaussian``, ``select``,
    ``threshold``), its scale (b, σ, ε/Δ or ε/u), its exact input and its output (a threshold
    run: the answers tested, on the grid, and the list of the tests' outcomes)."""

    kind: str
    scale: Fraction
    values: np.ndarray
    values_in: Any = None
    output: Any = None
    #: The sensitivity the mechanism was calibrated for (L1 for Laplace, L2 for Gaussian), when
    #: it was built by ``for_epsilon``/``for_rho`` while the tap was installed.
    declared: float | None = None


@dataclass
class Tap:
    """Records every noise draw and selection made while it is installed. Given the draws of a
    first run (``replay``), each mechanism is called on the FIRST run's input, so it consumes the
    same randomness and returns the same output, while the tap records this run's input: the
    second run sees the first run's outputs, as adaptive composition conditions on them."""

    replay: list[Draw] | None = None
    draws: list[Draw] = field(default_factory=list)
    #: (kind, scale) -> the largest sensitivity a mechanism of that scale was calibrated for.
    declared: dict[tuple[str, Fraction], float] = field(default_factory=dict)

    def _declare(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Record the sensitivity each Laplace/Gaussian is calibrated for as it is built."""

        def declaring(cls: type, method: str, kind: str, scale: str, squared: bool) -> None:
            original = getattr(cls, method)

            def build(budget: object, sensitivity: object, *args: Any, **kwargs: Any) -> Any:
                mechanism = original(budget, sensitivity, *args, **kwargs)
                size = float(Fraction(sensitivity))  # type: ignore[arg-type]
                key = (kind, Fraction(getattr(mechanism, scale)))
                value = size**0.5 if squared else size
                self.declared[key] = max(self.declared.get(key, 0.0), value)
                return mechanism

            monkeypatch.setattr(cls, method, build)

        declaring(Laplace, "for_epsilon", "laplace", "scale", squared=False)
        declaring(Laplace, "for_epsilon_floats", "laplace", "scale", squared=False)
        declaring(Gaussian, "for_rho", "gaussian", "sigma", squared=False)
        declaring(Gaussian, "for_rho_squared", "gaussian", "sigma", squared=True)

    @contextlib.contextmanager
    def installed(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tap]:
        depth = [0]  # a tapped call inside a tapped call (release_wide's zeros) is not recorded
        self._declare(monkeypatch)

        def recorder(original: Callable[..., Any], kind: str, scale: Callable[[Any], Fraction]):
            def recording(mechanism: Any, values: Any, *args: Any, **kwargs: Any) -> Any:
                if depth[0]:
                    return original(mechanism, values, *args, **kwargs)
                array = np.atleast_1d(np.array(values, dtype=np.float64))
                draw = Draw(kind, scale(mechanism), array, values_in=values)
                draw.declared = self.declared.get((kind, draw.scale))
                index = len(self.draws)
                self.draws.append(draw)
                depth[0] += 1
                try:
                    if self.replay is not None and index < len(self.replay):
                        first = self.replay[index]
                        if (first.kind, first.scale, first.values.shape) == (
                            kind, draw.scale, array.shape,
                        ):  # fmt: skip
                            original(mechanism, first.values_in, *args, **kwargs)
                            draw.output = first.output
                            return first.output
                    draw.output = original(mechanism, values, *args, **kwargs)
                    return draw.output
                finally:
                    depth[0] -= 1

            return recording

        def wrap(cls: type, method: str, kind: str, scale: Callable[[Any], Fraction]) -> None:
            monkeypatch.setattr(cls, method, recorder(getattr(cls, method), kind, scale))

        wrap(Laplace, "release_integers", "laplace", lambda m: Fraction(m.scale))
        wrap(Laplace, "release_floats", "laplace", lambda m: Fraction(m.scale))
        wrap(Gaussian, "release_integers", "gaussian", lambda m: Fraction(m.sigma))
        wrap(Gaussian, "release_floats", "gaussian", lambda m: Fraction(m.sigma))
        wrap(
            PermuteAndFlip,
            "select",
            "select",
            lambda m: Fraction(m.epsilon) / Fraction(m.sensitivity),
        )
        # release_wide adds a Gaussian's noise (drawn on zeros) to its values itself
        wide = recorder(noisy_wide.release_wide, "gaussian", lambda m: Fraction(m.sigma))
        for module in (noisy_wide, regression):
            monkeypatch.setattr(module, "release_wide", wide)
        self._tap_above_threshold(monkeypatch)
        yield self

    def _tap_above_threshold(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """AboveThreshold: a run's start (its noisy threshold) opens one ``threshold`` draw;
        each test appends its answer (on the mechanism's grid) and outcome to it. Replaying, the
        j-th test of a run is made on the first run's j-th answer and returns its outcome."""
        runs: dict[int, tuple[AboveThresholdRun, Draw, Draw | None]] = {}
        start, test = AboveThreshold.start, AboveThresholdRun.test

        def starting(mechanism: AboveThreshold, rng: Any = None) -> AboveThresholdRun:
            units = mechanism.threshold_scale * mechanism.epsilon / 2  # the grid sensitivity u
            draw = Draw("threshold", mechanism.epsilon / units, np.zeros(0), [], [])
            index = len(self.draws)
            self.draws.append(draw)
            first = None
            if self.replay is not None and index < len(self.replay):
                candidate = self.replay[index]
                if (candidate.kind, candidate.scale) == ("threshold", draw.scale):
                    first = candidate
            run = start(mechanism, rng)
            runs[id(run)] = (run, draw, first)
            return run

        def testing(run: AboveThresholdRun, answer: float) -> bool:
            if id(run) not in runs:  # a run restored from saved state: not started here
                raise AssertionError("tap: an AboveThreshold run the tap did not see start")
            _, draw, first = runs[id(run)]
            grid = run._mechanism.grid
            draw.values = np.append(draw.values, float(int(to_grid([answer], grid)[0])))
            draw.values_in.append(answer)
            j = len(draw.output)
            if first is not None and j < len(first.output):
                test(run, first.values_in[j])
                run.halted = first.output[j]
            else:
                test(run, answer)
            draw.output.append(run.halted)
            return run.halted

        def batch(mechanism: AboveThreshold, answers: Any, rng: Any = None) -> int | None:
            raise AssertionError("tap: first_above_batch is not tapped; add it to the tap")

        monkeypatch.setattr(AboveThreshold, "start", starting)
        monkeypatch.setattr(AboveThresholdRun, "test", testing)
        monkeypatch.setattr(AboveThreshold, "first_above_batch", batch)


@dataclass(frozen=True)
class Loss:
    """The privacy loss of one release on one pair of tables: the ε of its Laplace draws, of
    its selections and of its AboveThreshold runs, their ρ under zCDP accounting (ε²/2, the
    bounded-range ε²/8 and ε²/2 of each), the ρ of its Gaussian draws, and how many draws
    paired."""

    laplace: float
    selection: float
    rho: float
    pure_rho: float
    paired: int
    draws: int
    threshold: float = 0.0
    #: Draws whose input moved more than the sensitivity their mechanism was calibrated for.
    overshoots: tuple[str, ...] = ()


def loss(first: list[Draw], second: list[Draw]) -> Loss:
    """The loss of the paired draws, up to the first pair that asks a different question
    (another mechanism, scale or shape)."""
    laplace = selection = rho = pure_rho = threshold = 0.0
    paired = 0
    overshoots = []
    for index, (a, b) in enumerate(zip(first, second, strict=False)):
        if (a.kind, a.scale, a.values.shape) != (b.kind, b.scale, b.values.shape):
            break
        difference = a.values - b.values
        moved = {
            "laplace": float(np.abs(difference).sum()),
            "gaussian": float((difference**2).sum()) ** 0.5,
        }.get(a.kind)
        if a.declared is not None and moved is not None and moved > a.declared * (1 + 1e-9):
            overshoots.append(f"draw {index} ({a.kind}) moved {moved:g} > {a.declared:g}")
        if a.kind == "laplace":
            used = float(np.abs(difference).sum()) / float(a.scale)
            laplace += used
            pure_rho += used**2 / 2
        elif a.kind == "gaussian":
            rho += float((difference**2).sum()) / (2 * float(a.scale) ** 2)
        elif a.kind == "threshold":
            used = float(np.abs(difference).max(initial=0.0)) * float(a.scale)
            threshold += used
            pure_rho += used**2 / 2
        else:
            used = float(np.abs(difference).max(initial=0.0)) * float(a.scale)
            selection += used
            pure_rho += used**2 / 8
        paired += 1
    draws = min(len(first), len(second))
    return Loss(laplace, selection, rho, pure_rho, paired, draws, threshold, tuple(overshoots))


def within(charge: object, observed: Loss) -> bool:
    """Whether the observed loss fits the charge (a 10^-9 relative float margin)."""
    tolerance = 1 + 1e-9
    pure = observed.laplace + observed.selection + observed.threshold
    if isinstance(charge, PureDP):
        return observed.rho == 0 and pure <= float(charge.epsilon) * tolerance
    if isinstance(charge, ZCDP):
        return observed.rho + observed.pure_rho <= float(charge.rho) * tolerance
    if isinstance(charge, ApproxDP):
        gaussian = 0.0
        if observed.rho > 0:
            gaussian = float(ZCDP(Fraction(observed.rho)).to_approx(float(charge.delta)).epsilon)
        return pure + gaussian <= float(charge.epsilon) * tolerance
    raise AssertionError(f"unknown charge {charge!r}")


# ----------------------------------------------------------------------------------------------
# Running a kind


Release = Callable[[dpc.Session, SeededRng], object]


@dataclass(frozen=True)
class Kind:
    """One release kind: how to run it on a session, its budget, the relations and unit levels
    it supports (the others must be refused, free) and whether the check needs draws."""

    name: str
    release: Release
    budget: str = "epsilon"  # or "rho"
    relations: tuple[str, ...] = RELATIONS
    levels: tuple[str, ...] = LEVELS
    amount: float = 1.0
    #: Only the total loss is checked, not each draw against its calibration: the kind pays
    #: for several steps of its estimator's unit by group privacy (ε/steps a step), or
    #: calibrates one draw per coordinate of a vector (ε/c for each of c values), so a draw
    #: may move more than the sensitivity it was built for while the charge still covers it.
    total_only: bool = False
    #: Seeds run on every pair (a kind whose worst case needs the randomness to put a
    #: person's rows in different blocks runs several).
    seeds: int = 1


class Engines:
    """The engine of each tiny table (its DuckDB copy, loaded by ``Session.from_data``), opened
    once and shared by the runs of a test module: each run is a new :class:`dpcurator.Session`
    on that engine with its own budget filter and seed. The engine holds the table, read only
    (its caches of built SQL and of bounding columns computed on first use hold no released
    value: :meth:`.DuckDBBackend._flag`), so a run sees what a fresh open would; opening it
    (~70 ms of CPU: a DuckDB database, the typed copy with its key codes) was most of a
    typical row's time when every run opened its own."""

    def __init__(self) -> None:
        self._opened: dict[tuple[str, str], dpc.Session] = {}

    def __enter__(self) -> Engines:
        return self

    def __exit__(self, *exc: object) -> None:
        for opened in self._opened.values():
            opened.close()
        self._opened.clear()

    def session(
        self, kind: Kind, table: pd.DataFrame, meta: dpc.Metadata, rng: SeededRng
    ) -> dpc.Session:
        """A fresh session on ``table``'s engine with a budget of 4·``kind.amount`` (ε, or
        ρ-zCDP)."""
        key = (repr(meta), table.to_json())
        if key not in self._opened:
            self._opened[key] = dpc.Session.from_data(table, metadata=meta, budget=dpc.Budget(1))
        engine = self._opened[key]._backend
        if kind.budget == "rho":
            budget = PrivacyFilter(ZCDP(kind.amount * 4), ZCDPAccountant())
            return dpc.Session(engine, meta, budget_filter=budget, rng=rng)
        return dpc.Session(engine, meta, budget=dpc.Budget(kind.amount * 4, 1e-3), rng=rng)


@pytest.fixture(scope="module", name="engines")
def module_engines() -> Iterator[Engines]:
    """The fixture ``engines``: the tiny tables' engines, opened once for the rows of a test
    module (which imports it)."""
    with Engines() as opened:
        yield opened


def run(  # noqa: PLR0917 (the kind, the table and its engines, the seed, the patch)
    kind: Kind,
    table: pd.DataFrame,
    meta: dpc.Metadata,
    seed: int,
    patch: pytest.MonkeyPatch,
    engines: Engines,
    *,
    replay: list[Draw] | None = None,
) -> tuple[list[Draw], object]:
    """The draws and the charge of one release of ``kind`` on ``table`` (replaying ``replay``'s
    outputs when given)."""
    rng = SeededRng(seed)
    opened = engines.session(kind, table, meta, rng)
    with patch.context() as scoped, Tap(replay).installed(scoped) as tap:
        kind.release(opened, rng)
    return tap.draws, opened.spent()


def audit(
    kind: Kind, relation: str, level: str, monkeypatch: pytest.MonkeyPatch, engines: Engines
) -> list[str]:
    """The pairs on which ``kind`` lost more than it charged (empty: it conforms), after
    checking that an unsupported relation or unit is refused, free (sessions on ``engines``)."""
    meta = metadata(relation, level, len(_base(level)))
    if relation not in kind.relations or level not in kind.levels:
        opened = engines.session(kind, frame(_base(level), level), meta, SeededRng(0))
        before = opened.spent()
        with pytest.raises(UnsupportedQueryError):
            kind.release(opened, SeededRng(0))
        assert opened.spent() == before, f"{kind.name}: a refusal was charged"
        return []
    failures = []
    pairs = list(enumerate(neighbours(relation, level)))
    first: dict[int, tuple[list[Draw], object]] = {}  # D is the same table in every pair
    for seed, (index, (table, other)) in itertools.product(range(kind.seeds), pairs):
        if seed not in first:
            first[seed] = run(kind, table, meta, SEED + seed, monkeypatch, engines)
        draws, charge = first[seed]
        other_draws, _ = run(kind, other, meta, SEED + seed, monkeypatch, engines, replay=draws)
        observed = loss(draws, other_draws)
        assert observed.paired >= 1, f"{kind.name}: no mechanism invocation was recorded"
        if not within(charge, observed):
            failures.append(f"pair {index}: loss {observed} above the charge {charge}")
        if not kind.total_only:
            failures += [f"pair {index}: {what}" for what in observed.overshoots]
    return failures
