"""One study's state and its loop: ask, reject, join pending, answer known, reuse, warm start, tell.

A :class:`Study` is one (kernel version, problem, device class) search with a trial budget. It
knows nothing of databases or Ray: whoever drives it (the job driver, with a ledger and a worker
pool; the search benchmark, with a landscape) asks it for configs to measure and tells it what
they measured.

Per suggestion of the sampler, in order (:meth:`Study.propose`): a config that breaks the space's
constraints on the device is told PRUNED at no cost (``rejected``); a config is replaced by the
representative of its class where the spec says which configs launch the same programs on the
problem (``equivalent``: :meth:`search_spaces.spec.KernelSpec.equivalence`); a config already
pending joins that measurement and one already known is answered from this study (``cached``); a
config the ``reuse`` hook knows (the driver: measured for the same key by any job) is answered from
it and counts toward the budget (``reused``); else it is returned, pending until
:meth:`Study.tell`. Budget = configs counted (measured or reused, whatever their outcome). The
study is exhausted when every valid config (every class) is known. After ``IDLE_LIMIT`` suggestions in a row that needed no new
measurement (TPE and GP keep proposing known or constraint-breaking configs on sparse spaces, see
benchmarks/results/search/), an unmeasured valid config drawn at random is queued
(:meth:`SearchStudy.unstick`), so the budget is spent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from optuna.trial import Trial

from orchestrator.study.search import SearchStudy
from search_spaces.space import Config, DeviceLimits, Space, config_key


@dataclass(frozen=True)
class Answer:
    """A config's result: its time in ms (None: no valid time) and, in a job, the id of the
    ``ok`` trial row that holds it (what promotion points at)."""

    value: float | None
    row: int | None = None


#: A valid config -> the representative of its class of configs that run alike (valid too).
Equivalent = Callable[[Config], Config]

#: ``(config, key) -> Answer`` when the config was measured elsewhere (it is then counted as
#: reused), else None.
Reuse = Callable[[Config, str], Answer | None]


@dataclass(frozen=True)
class Ranked:
    """One of a study's fastest configs: the config, its time, its ``ok`` row."""

    config: Config
    value: float
    row: int


class Study:
    """The state and loop of one study (see the module docstring)."""

    def __init__(
        self,
        search: SearchStudy,
        space: Space,
        limits: DeviceLimits,
        budget: int,
        *,
        valid: int | None = None,
        reuse: Reuse | None = None,
        equivalent: Equivalent | None = None,
    ) -> None:
        """``valid``: how many valid configs ``space`` has on ``limits`` (counted if None). With
        ``equivalent`` there may be fewer classes: a study that knows every class is found
        exhausted when it stalls (:meth:`SearchStudy.unstick`), not counted up front (0.08 s of
        CPU per study on the H200 matmul space)."""
        self.search = search
        self.space, self.limits = space, limits
        self.budget = budget
        self._equivalent = equivalent
        self.valid = space.count(limits) if valid is None else valid
        self._reuse = reuse
        self.values: dict[str, float | None] = {}  # config key -> time, None: no valid time
        self.rows: dict[str, int] = {}  # config key -> its ok trial row
        self.configs: dict[str, Config] = {}
        self.pending: dict[str, list[Trial]] = {}  # config key -> the trials waiting for it
        self.counted = self.measured = self.reused = 0
        self.asks = self.rejected = self.cached = 0
        self._best: float | None = None  # the fastest of ``values`` (kept per record)
        self.exhausted = False

    # ----- history
    def restore(self, results: Iterable[tuple[Config, Answer, bool]]) -> None:
        """Rebuild from a resumed job's results ``(config, answer, reused)``, in the order they
        were recorded: each counts toward the budget and is taught to the sampler."""
        for config, answer, reused in results:
            key = config_key(self.representative(config))
            self.counted += 1
            self.reused += int(reused)
            self.measured += int(not reused)
            self.values[key] = answer.value
            self.configs[key] = dict(config)
            if answer.value is not None and answer.row is not None:
                self.rows[key] = answer.row
        self._best = _fastest(self.values.values())
        for key, value in self.values.items():
            self.search.add_history(self.configs[key], value)

    def warm_start(self, configs: Sequence[Config]) -> None:
        """Queue ``configs`` to be asked first, unless the study has history (a resumed one)."""
        if self.values:
            return
        for config in configs:
            self.search.enqueue(config)

    # ----- the loop
    def wants(self) -> bool:
        """True while the study may propose another config (budget left, not exhausted)."""
        return not self.exhausted and self.counted + len(self.pending) < self.budget

    def finished(self) -> bool:
        """Nothing pending and nothing more to propose."""
        return not self.pending and (self.exhausted or self.counted >= self.budget)

    def propose(self, max_asks: int) -> Config | None:
        """Ask the sampler (at most ``max_asks`` times) until a config needs a measurement: it is
        returned and pending until :meth:`tell` or :meth:`drop`. None when the budget is met, the
        study is exhausted, or ``max_asks`` asks brought nothing new."""
        found = self.propose_keyed(max_asks)
        return None if found is None else found[1]

    def propose_keyed(self, max_asks: int) -> tuple[str, Config] | None:
        """:meth:`propose`, with the config's key (``config_key``) that it computed."""
        for _ in range(max_asks):
            if not self.wants():
                return None
            if len(self.values) >= self.valid or not self.search.unstick(
                self.values, self.pending, equivalent=self._equivalent
            ):
                self.exhausted = True
                return None
            trial, config = self.search.ask()
            self.asks += 1
            violation = self.space.violation(config, self.limits)
            if violation is not None:
                self.search.tell_bad(trial, str(violation))
                self.rejected += 1
                self.search.note(new=False)
                continue
            config = self.representative(config)
            key = config_key(config)
            if key in self.pending:
                self.pending[key].append(trial)
                self.cached += 1
            elif key in self.values:
                self._tell([trial], self.values[key])
                self.cached += 1
            else:
                answer = self._reuse(config, key) if self._reuse is not None else None
                self.search.note(new=True)
                if answer is None:
                    self.pending[key] = [trial]
                    self.configs[key] = config
                    return key, config
                self._record(key, config, answer)
                self.reused += 1
                self._tell([trial], answer.value)
                continue
            self.search.note(new=False)
        return None

    def tell(self, config: Config, answer: Answer, key: str | None = None) -> None:
        """The measurement of a pending config: counted, and told to every trial waiting for it
        (``key``: the config's ``config_key``, computed if None)."""
        key = config_key(config) if key is None else key
        self._record(key, config, answer)
        self.measured += 1
        self._tell(self.pending.pop(key, []), answer.value)

    def representative(self, config: Config) -> Config:
        """The config that stands for ``config``'s class (``config`` itself without
        ``equivalent``)."""
        return config if self._equivalent is None else self._equivalent(config)

    def hold(self, config: Config) -> None:
        """Make ``config`` pending without asking the sampler (a resumed job's re-measurement
        that was in flight); :meth:`tell` counts it as usual."""
        key = config_key(config)
        self.pending.setdefault(key, [])
        self.configs[key] = dict(config)

    def drop(self, config: Config) -> None:
        """Give up on a pending config (its workers kept being lost): told without a time, not
        counted."""
        self._tell(self.pending.pop(config_key(config), []), None)

    def _record(self, key: str, config: Config, answer: Answer) -> None:
        again = key in self.values
        self.values[key] = answer.value
        if again:  # a time replaced (not the loop's way): the fastest found again
            self._best = _fastest(self.values.values())
        elif answer.value is not None and (self._best is None or answer.value < self._best):
            self._best = answer.value
        self.configs[key] = config
        if answer.value is not None and answer.row is not None:
            self.rows[key] = answer.row
        self.counted += 1

    def _tell(self, trials: Sequence[Trial], value: float | None) -> None:
        for trial in trials:
            if value is None:
                self.search.tell_bad(trial, "no valid time")
            else:
                self.search.tell_ok(trial, value)

    # ----- results
    @property
    def best_ms(self) -> float | None:
        """The fastest time so far (the driver reports it after every trial: kept, not
        searched)."""
        return self._best

    def ranked(self, k: int) -> list[Ranked]:
        """The ``k`` fastest configs that have an ``ok`` row, fastest first."""
        keys = sorted(
            (key for key, v in self.values.items() if v is not None and key in self.rows),
            key=lambda key: self.values[key] or 0.0,
        )[:k]
        return [Ranked(self.configs[key], self.values[key] or 0.0, self.rows[key]) for key in keys]


def _fastest(values: Iterable[float | None]) -> float | None:
    ok = [v for v in values if v is not None]
    return min(ok) if ok else None
