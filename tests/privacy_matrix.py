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
from dataclasses import dataclass, field, replace
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
#: compression keeps a/u and b/v and merges c, d and w, z.
BASE: tuple[tuple[Row, ...], ...] = tuple(
    ((g, h, x, y),) for g, h, x, y in [
        ("a", "u", 1.0, 0), ("a", "u", 2.5, 1), ("a", "v", 4.0, 0), ("b", "v", 6.0, 1),
        ("b", "u", 8.0, 1), ("b", "v", 9.5, 0), ("a", "u", 3.0, 1), ("b", "v", 7.0, 0),
    ]
)  # fmt: skip


def _newcomers(level: str) -> tuple[tuple[Row, ...], ...]:
    """The persons that join or replace: extremes of every column, one cell or spread over as
    many cells as the unit lets one person own (more than the bound, under user level)."""
    rows = {"row": 1, "rows": 2, "person": 5}[level]
    low = tuple(("a", "u", 0.0, 0) for _ in range(rows))
    high = tuple(("d", "z", 10.0, 1) for _ in range(rows))
    cells = [("c", "w"), ("d", "z"), ("c", "z"), ("d", "w"), ("c", "w")]
    spread = tuple((g, h, 10.0, 1) for g, h in cells[:rows])
    return (low, high, spread)


def _base(level: str) -> tuple[tuple[Row, ...], ...]:
    """The base persons for a level: one row each, or pairs of rows a person when r > 1."""
    if level == "row":
        return BASE
    rows = [r for person in BASE for r in person]
    return tuple(tuple(rows[i : i + 2]) for i in range(0, len(rows), 2))


def frame(persons: tuple[tuple[Row, ...], ...], level: str) -> pd.DataFrame:
    """The table of ``persons`` (a ``pid`` column under user level)."""
    records = []
    for pid, person in enumerate(persons):
        for g, h, x, y in person:
            record: dict[str, Any] = {"g": g, "h": h, "x": x, "y": y}
            if level == "person":
                record["pid"] = pid
            records.append(record)
    columns = ["g", "h", "x", "y"] + (["pid"] if level == "person" else [])
    return pd.DataFrame.from_records(records, columns=columns)


def neighbours(relation: str, level: str) -> Iterator[tuple[pd.DataFrame, pd.DataFrame]]:
    """Pairs (D, D') of neighbouring tables: add/remove — a newcomer added, or a base person
    removed; replace-one — a base person replaced by a newcomer (the table size unchanged)."""
    base = _base(level)
    table = frame(base, level)
    newcomers = _newcomers(level)
    if relation == "add_remove":
        for person in newcomers:
            yield table, frame((*base, person), level)
        for i in (0, 3):
            yield table, frame(base[:i] + base[i + 1 :], level)
        return
    for i, person in itertools.product((0, 3), newcomers):
        yield table, frame((*base[:i], person, *base[i + 1 :]), level)


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


@dataclass
class Tap:
    """Records every noise draw and selection made while it is installed. Given the draws of a
    first run (``replay``), each mechanism is called on the FIRST run's input, so it consumes the
    same randomness and returns the same output, while the tap records this run's input: the
    second run sees the first run's outputs, as adaptive composition conditions on them."""

    replay: list[Draw] | None = None
    draws: list[Draw] = field(default_factory=list)

    @contextlib.contextmanager
    def installed(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tap]:
        depth = [0]  # a tapped call inside a tapped call (release_wide's zeros) is not recorded

        def recorder(original: Callable[..., Any], kind: str, scale: Callable[[Any], Fraction]):
            def recording(mechanism: Any, values: Any, *args: Any, **kwargs: Any) -> Any:
                if depth[0]:
                    return original(mechanism, values, *args, **kwargs)
                array = np.atleast_1d(np.array(values, dtype=np.float64))
                draw = Draw(kind, scale(mechanism), array, values_in=values)
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


def loss(first: list[Draw], second: list[Draw]) -> Loss:
    """The loss of the paired draws, up to the first pair that asks a different question
    (another mechanism, scale or shape)."""
    laplace = selection = rho = pure_rho = threshold = 0.0
    paired = 0
    for a, b in zip(first, second, strict=False):
        if (a.kind, a.scale, a.values.shape) != (b.kind, b.scale, b.values.shape):
            break
        difference = a.values - b.values
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
    return Loss(laplace, selection, rho, pure_rho, paired, draws, threshold)


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


def session(kind: Kind, table: pd.DataFrame, meta: dpc.Metadata, rng: SeededRng) -> dpc.Session:
    """A fresh session on ``table`` with a budget of 4·``kind.amount`` (ε, or ρ-zCDP)."""
    if kind.budget == "rho":
        budget = PrivacyFilter(ZCDP(kind.amount * 4), ZCDPAccountant())
        return dpc.Session.from_data(table, metadata=meta, budget_filter=budget, rng=rng)
    return dpc.Session.from_data(
        table, metadata=meta, budget=dpc.Budget(kind.amount * 4, 1e-3), rng=rng
    )


def run(
    kind: Kind,
    table: pd.DataFrame,
    meta: dpc.Metadata,
    seed: int,
    patch: pytest.MonkeyPatch,
    *,
    replay: list[Draw] | None = None,
) -> tuple[list[Draw], object]:
    """The draws and the charge of one release of ``kind`` on ``table`` (replaying ``replay``'s
    outputs when given)."""
    rng = SeededRng(seed)
    opened = session(kind, table, meta, rng)
    try:
        with patch.context() as scoped, Tap(replay).installed(scoped) as tap:
            kind.release(opened, rng)
        return tap.draws, opened.spent()
    finally:
        opened.close()


def audit(kind: Kind, relation: str, level: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pairs on which ``kind`` lost more than it charged (empty: it conforms), after
    checking that an unsupported relation or unit is refused, free."""
    meta = metadata(relation, level, len(_base(level)))
    if relation not in kind.relations or level not in kind.levels:
        opened = session(kind, frame(_base(level), level), meta, SeededRng(0))
        try:
            before = opened.spent()
            with pytest.raises(UnsupportedQueryError):
                kind.release(opened, SeededRng(0))
            assert opened.spent() == before, f"{kind.name}: a refusal was charged"
        finally:
            opened.close()
        return []
    failures = []
    for index, (table, other) in enumerate(neighbours(relation, level)):
        meta_other = (
            replace(meta, public_size=meta.public_size) if relation == "replace_one" else meta
        )
        draws, charge = run(kind, table, meta, 1000 + index, monkeypatch)
        other_draws, _ = run(kind, other, meta_other, 1000 + index, monkeypatch, replay=draws)
        observed = loss(draws, other_draws)
        assert observed.paired >= 1, f"{kind.name}: no mechanism invocation was recorded"
        if not within(charge, observed):
            failures.append(f"pair {index}: loss {observed} above the charge {charge}")
    return failures
