"""``local``: a neighbourhood search around the best measured configs (its moves are three in four
of the default ``learned`` sampler's proposals)."""

from __future__ import annotations

import bisect
import random
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from orchestrator.study.samplers import one_blas_thread, whole_trial

#: Configs whose unasked neighbours ``local`` weighs against each other (the best ones with any).
LOCAL_PARENTS = 2
#: Ridge penalty of ``local``'s model (per one-hot coefficient, on centred log times).
LOCAL_RIDGE = 1.0
#: Random picks among the valid points before a draw scans for an unasked one (while at most
#: half of them were asked; past that it scans at once).
STARTUP_DRAWS = 64
#: Points whose valid neighbours a space's index keeps for every study (then it starts again).
NEIGHBOURS_KEPT = 20_000


class LocalSearchSampler(BaseSampler):
    """Random startup, then an unasked neighbour of the best measured configs.

    Startup configs are drawn uniformly from the unasked valid points (given ``valid``). A neighbour moves one parameter one index step (a categorical: to any other value). Given
    the space's valid points (``valid``, Optuna params), a move that breaks a constraint is
    repaired: the neighbour is the valid point with the moved value nearest to the config (fewest
    index steps in the other parameters; every tie), so coupled parameters move together (a
    larger BLOCK_K with fewer stages, split-K with the BLOCK_M and GROUP_M it allows) instead of
    the move being rejected. Among the unasked neighbours of the ``LOCAL_PARENTS`` best configs
    that have any, the one predicted fastest is asked: its parent's measured log time plus the
    change an additive model (ridge over one-hot parameter values, fitted to the measured log
    times) predicts for the move; ties are broken at random. A second parent keeps a plateau of
    near-equal configs around the best from hiding a nearby better region. When every
    neighbour of every measured config is known (valid points in islands no move leaves): a
    random unasked valid point, as at startup. Asked-but-pending configs count as known."""

    def __init__(
        self,
        distributions: Mapping[str, BaseDistribution],
        seed: int,
        startup: int,
        valid: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
        *,
        positions: Callable[[], np.ndarray] | None = None,
    ) -> None:
        """``valid`` returns the space's valid points; ``positions`` (instead of ``valid``)
        returns them as index positions, one row per point, columns in the order of
        ``distributions`` (an array it does not change, which may be shared between studies).
        Either is called once, when first needed."""
        self._distributions = dict(distributions)
        self._names = list(self._distributions)
        self._rng = random.Random(seed)
        self._random = RandomSampler(seed=seed)
        self._startup = startup
        self._load_valid = valid
        self._load_positions = positions
        self._valid: np.ndarray | None = None  # valid points as index positions, one per row
        self._sizes = [_size(d) for d in self._distributions.values()]
        self._offsets = np.cumsum([0, *self._sizes[:-1]])
        self._ordered = np.array(
            [isinstance(d, IntDistribution) for d in self._distributions.values()]
        )
        # Neighbours without valid points (with them, _ValidIndex keeps them for every study).
        self._neighbour_cache: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        width = sum(self._sizes)
        self._model: tuple[int, np.ndarray] = (-1, np.zeros(width))
        # The ridge fit's sums over the complete trials: the one-hot features' Gram matrix
        # (counts), their sums of log times, the log times' sum; the trials looked at since the
        # last fit are added to them by that fit, all at once (_unfitted: columns, log time).
        self._gram = LOCAL_RIDGE * np.eye(width)
        self._feature_logs = np.zeros(width)
        self._feature_counts = np.zeros(width)
        self._unfitted: list[tuple[np.ndarray, float]] = []
        self._log_sum = 0.0
        # Parent candidates: the complete trials as (value, number, position), fastest first
        # (ties by number), less those found with every neighbour asked (for good: asked
        # positions only grow).
        self._ranked: list[tuple[float, int, tuple[int, ...]]] = []
        self._positions: dict[int, tuple[int, ...]] = {}
        # What sample_relative knows of the study's trials, brought up to date per call by
        # looking only at the trials that are new or may have changed (see _look).
        self._scanned = 0  # trials (by number) looked at
        self._seen: set[tuple[int, ...]] = set()  # positions of the trials looked at
        self._seen_order: list[tuple[int, ...]] = []  # the same, in the order first seen
        # Rows of the valid points asked, marked up to _seen_order[:_marked] (once needed).
        self._asked: np.ndarray | None = None
        self._marked = 0
        self._unplaced: set[int] = set()  # looked at, without params yet (queued, being asked)
        self._open: set[int] = set()  # looked at, not finished yet
        self._done: dict[int, tuple[tuple[int, ...], float]] = {}  # complete with a value

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self._distributions)

    def _position(self, params: Mapping[str, Any]) -> tuple[int, ...] | None:
        """Index of each parameter's value (None if one is missing)."""
        out = []
        for name, dist in self._distributions.items():
            if name not in params:
                return None
            if isinstance(dist, CategoricalDistribution):
                out.append(dist.choices.index(params[name]))
            else:
                out.append(int(params[name]) - int(getattr(dist, "low", 0)))
        return tuple(out)

    def _params(self, position: Sequence[int]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for (name, dist), i in zip(self._distributions.items(), position, strict=True):
            if isinstance(dist, CategoricalDistribution):
                out[name] = dist.choices[i]
            else:
                out[name] = int(getattr(dist, "low", 0)) + int(i)
        return out

    def _trial_position(self, trial: FrozenTrial) -> tuple[int, ...] | None:
        """:meth:`_position` of a trial's params (cached once complete: fixed once asked; a
        queued trial has none yet)."""
        x = self._positions.get(trial.number)
        if x is None:
            x = self._position(trial.params)
            if x is not None:
                self._positions[trial.number] = x
        return x

    def _neighbours(self, x: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Every neighbour of ``x`` (repaired to valid points given ``valid``; see the class)."""
        if self._valid is not None:
            return _ValidIndex.of(self._valid, self._sizes, self._ordered).neighbours(x)
        found = self._neighbour_cache.get(x)
        if found is None:
            found = self._neighbour_cache[x] = [
                (*x[:j], v, *x[j + 1 :]) for j, v in _moves(x, self._sizes, self._ordered)
            ]
        return found

    def _fit(self) -> np.ndarray:
        """Ridge coefficients per one-hot parameter value for the measured log times (centred),
        from the sums :meth:`_look` keeps (solved again once more configs were measured)."""
        n = len(self._done)
        if self._model[0] == n:
            return self._model[1]
        if self._unfitted:
            columns = np.array([c for c, _ in self._unfitted])
            logs = np.array([log for _, log in self._unfitted])
            onehot = np.zeros((len(columns), len(self._gram)))
            np.put_along_axis(onehot, columns, 1.0, axis=1)
            self._gram += onehot.T @ onehot
            self._feature_logs += onehot.T @ logs
            self._feature_counts += onehot.sum(axis=0)
            self._log_sum += float(logs.sum())
            self._unfitted.clear()
        mean = self._log_sum / n
        rhs = self._feature_logs - mean * self._feature_counts
        one_blas_thread()
        coef = np.linalg.solve(self._gram, rhs)
        self._model = (n, coef)
        return coef

    def _add_done(self, number: int, x: tuple[int, ...], value: float) -> None:
        """Count complete trial ``number`` (at ``x``, ``value``) among the parent candidates and
        for the next fit."""
        self._done[number] = (x, value)
        log = float(np.log(max(value, 1e-300)))
        self._unfitted.append((self._offsets + np.asarray(x), log))
        bisect.insort(self._ranked, (value, number, x))

    def sample_trial(self, study: Study, trial: FrozenTrial) -> dict[str, Any]:
        """Every parameter of a new ``trial`` (not yet in the study), as Optuna's ``ask`` with
        this sampler's distributions fixed makes them: the relative sample, and for each
        parameter it leaves out (or out of range) an independent draw, in distribution order.
        One call instead of Optuna's per-parameter suggest (its checks and copies of the trial
        were a third of a driver's CPU)."""
        return whole_trial(self, study, trial, self._distributions)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._update(study)
        if len(self._done) < self._startup:
            return self._startup_draw(self._seen)
        moved = self._best_move()
        return self._startup_draw(self._seen) if moved is None else self._params(moved)

    def sample_move(self, study: Study) -> dict[str, Any]:
        """The params of the unasked neighbour :meth:`sample_relative` would pick, ``{}`` when
        there is none (no startup draw, no unasked point instead): the moves of a sampler that
        falls back on its own way. The study must have a complete trial."""
        self._update(study)
        moved = self._best_move()
        return {} if moved is None else self._params(moved)

    def asked_every_config(self) -> bool:
        """Whether every valid point was asked (found when a draw for an unasked one had none)."""
        return self._asked is not None and bool(self._asked.all())

    def _update(self, study: Study) -> None:
        """Look at the study's trials (:meth:`_look`); load the valid points once."""
        self._look(study.get_trials(deepcopy=False))
        if self._valid is None and self._load_positions is not None:
            self._valid = self._load_positions()
        elif self._valid is None and self._load_valid is not None:
            points = [self._position(p) for p in self._load_valid()]
            valid = np.array([x for x in points if x is not None], dtype=np.int64)
            self._valid = valid.reshape(-1, len(self._names))

    def _best_move(self) -> tuple[int, ...] | None:
        """The unasked neighbour of the ``LOCAL_PARENTS`` best configs that have any that the
        model predicts fastest (see the class); None when no complete trial has one."""
        seen = self._seen
        coef = self._fit()
        best: tuple[float, tuple[int, ...]] | None = None
        parents = 0
        ranked = self._ranked
        i = 0
        while i < len(ranked) and parents < LOCAL_PARENTS:
            value, _, x = ranked[i]
            unseen = [y for y in self._neighbours(x) if y not in seen]
            if not unseen:
                del ranked[i]  # every neighbour asked: never a parent again
                continue
            i += 1
            self._rng.shuffle(unseen)
            base = np.log(max(value, 1e-300)) - self._predict(coef, x)
            # Rounded: a value never measured has coefficient 0 only up to the solver's rounding,
            # which differs between BLAS kernel sets; ties must stay ties on every machine.
            scores = np.round(base + coef[self._offsets + np.array(unseen)].sum(axis=1), 9)
            k = int(np.argmin(scores))  # the first of the lowest, in the shuffled order
            if best is None or scores[k] < best[0]:
                best = (float(scores[k]), unseen[k])
            parents += 1
        return None if best is None else best[1]

    def _look(self, trials: Sequence[FrozenTrial]) -> None:
        """Bring ``_seen`` (the positions of every trial with params) and ``_done`` (the
        position and value of every complete trial, by number) up to date with ``trials``
        (the study's, by number): the new trials are looked at, then those without params or
        not finished when last looked at. A trial's params, once set, and a finished trial
        never change."""
        for t in trials[self._scanned :]:
            self._unplaced.add(t.number)
            self._open.add(t.number)
        self._scanned = len(trials)
        for n in list(self._unplaced):
            x = self._trial_position(_numbered(trials, n))
            if x is not None:
                if x not in self._seen:
                    self._seen.add(x)
                    self._seen_order.append(x)
                self._unplaced.discard(n)
        for n in list(self._open):
            t = _numbered(trials, n)
            if not t.state.is_finished():
                continue
            self._open.discard(n)
            if t.state is TrialState.COMPLETE and t.value is not None:
                x = self._trial_position(t)
                if x is not None:
                    self._add_done(n, x, float(t.value))

    def _startup_draw(self, seen: set[tuple[int, ...]]) -> dict[str, Any]:
        """A uniform draw from the valid points not asked yet (``seen``: the asked ones): the
        distribution rejection sampling of the product space gives, without the rejected asks
        (random draws of a constrained space such as matmul's break a rule most of the time).
        ``{}`` (Optuna's independent random draw) without valid points or when every one was
        asked."""
        if self._valid is None or not len(self._valid):
            return {}
        if 2 * len(seen) < len(self._valid):  # a draw is likely unasked: no need to mark
            for _ in range(STARTUP_DRAWS):
                x = tuple(int(i) for i in self._valid[self._rng.randrange(len(self._valid))])
                if x not in seen:
                    return self._params(x)
        rows = _ValidIndex.of(self._valid, self._sizes, self._ordered).rows
        if self._asked is None:
            self._asked = np.zeros(len(self._valid), dtype=bool)
        new = self._seen_order[self._marked :]
        self._asked[[rows[x] for x in new if x in rows]] = True
        self._marked += len(new)
        free = np.flatnonzero(~self._asked)
        if not len(free):
            return {}
        return self._params(self._valid[free[self._rng.randrange(len(free))]].tolist())

    def _predict(self, coef: np.ndarray, x: Sequence[int]) -> float:
        return float(coef[self._offsets + np.asarray(x)].sum())

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)


def _numbered(trials: Sequence[FrozenTrial], number: int) -> FrozenTrial:
    """Trial ``number`` of a study's trials (in number order: its index, in Optuna's
    storages)."""
    if number < len(trials) and trials[number].number == number:
        return trials[number]
    return next(t for t in trials if t.number == number)


def _moves(x: Sequence[int], sizes: Sequence[int], ordered: np.ndarray) -> list[tuple[int, int]]:
    """``(parameter, value index)`` of every one-parameter move from ``x``: one index step of an
    ordered parameter, any other value of a categorical one."""
    return [
        (j, v)
        for j, size in enumerate(sizes)
        for v in ((x[j] - 1, x[j] + 1) if ordered[j] else range(size))
        if 0 <= v < size and v != x[j]
    ]


def _size(dist: BaseDistribution) -> int:
    if isinstance(dist, IntDistribution):
        return dist.high - dist.low + 1
    return len(getattr(dist, "choices", ()))


class _ValidIndex:
    """A space's valid points (index positions, one per row) indexed for the repair of a move:
    each point's row, per parameter ``j`` and value ``v`` the rows (ascending) whose ``j`` is
    ``v``, and each row's one-hot columns, from which :meth:`steps` counts every row's index
    steps from a point in one gather. A move is then repaired among the points with the moved
    value only, and not at all when the moved point is valid. One per points array
    (:meth:`of`), shared by the studies that share the array, with the neighbours found so far
    (a server's studies of one kernel on one device ask for the same points' neighbours over
    and over; forgotten past ``NEIGHBOURS_KEPT`` points)."""

    _built: ClassVar[dict[int, _ValidIndex]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, points: np.ndarray, sizes: Sequence[int], ordered: np.ndarray) -> None:
        self.of_points = weakref.ref(points)
        self._points = points.copy()  # not ``points``: the index must not keep it alive
        self._sizes = list(sizes)
        self._ordered_params = np.asarray(ordered)
        self._found: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        self.rows = {x: i for i, x in enumerate(map(tuple, points.tolist()))}
        self.rows_with = [
            [np.flatnonzero(points[:, j] == v) for v in range(size)] for j, size in enumerate(sizes)
        ]
        offsets = np.cumsum([0, *sizes[:-1]])
        self._columns = points + offsets
        # Per one-hot column: its parameter, its value index, whether the parameter is ordered.
        self._param = np.repeat(np.arange(len(sizes)), sizes)
        self._value = np.concatenate([np.arange(size) for size in sizes])
        self._ordered = np.asarray(ordered)[self._param]

    def neighbours(self, x: tuple[int, ...]) -> list[tuple[int, ...]]:
        """The valid neighbours of ``x``, each once: a move's point where it is valid, else the
        valid points with the moved value nearest to ``x`` (every tie); see
        :class:`LocalSearchSampler`. Kept once found (threads may both find one: the same list)."""
        found = self._found.get(x)
        if found is not None:
            return found
        out: list[tuple[int, ...]] = []
        steps: np.ndarray | None = None
        for j, v in _moves(x, self._sizes, self._ordered_params):
            moved = (*x[:j], v, *x[j + 1 :])
            if moved in self.rows:  # valid as it is: the only point 0 steps away
                out.append(moved)
                continue
            rows = self.rows_with[j][v]
            if not len(rows):
                continue
            # Every row of ``rows`` is as far from x in parameter j: the fewest steps in the
            # other parameters are the fewest in all.
            steps = self.steps(x) if steps is None else steps
            far = steps[rows]
            out.extend(map(tuple, self._points[rows[far == far.min()]].tolist()))
        if len(self._found) >= NEIGHBOURS_KEPT:
            self._found.clear()
        found = self._found[x] = list(dict.fromkeys(out))
        return found

    def steps(self, x: Sequence[int]) -> np.ndarray:
        """Every row's index steps from ``x`` (summed over the parameters; a categorical one
        differing is one step)."""
        at = np.asarray(x)[self._param]
        per_column = np.where(self._ordered, np.abs(self._value - at), self._value != at)
        return per_column[self._columns].sum(axis=1)

    @classmethod
    def of(cls, points: np.ndarray, sizes: Sequence[int], ordered: np.ndarray) -> _ValidIndex:
        """The index of ``points`` (built on first use; let go with the array)."""
        found = cls._built.get(id(points))
        if found is not None and found.of_points() is points:
            return found
        with cls._lock:
            found = cls._built.get(id(points))
            if found is None or found.of_points() is not points:
                found = cls._built[id(points)] = cls(points, sizes, ordered)
                weakref.finalize(points, cls._built.pop, id(points), None)
            return found
