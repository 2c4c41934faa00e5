"""The sampler registry: one table of name -> factory, from which job validation, the CLI help
and the search benchmark's list come.

A sampler is a :class:`SamplerEntry`: its name, a factory ``(SamplerContext) ->
optuna.samplers.BaseSampler`` (the context: seed, budget, the study's encoding, its kernel spec,
problem and device class), one line of help, whether it needs every parameter encoded as a
number, which spaces it fits, and the modules it needs. Built-ins: ``learned`` (the default),
``local``, ``tpe``, ``gp``, ``random``, ``grid``, ``cmaes``. A team adds one without forking, like a kernel:
an entry point of the group ``tunefleet.samplers`` whose value is ``module:ATTRIBUTE`` naming a
``SamplerEntry`` (in pyproject.toml: ``[project.entry-points."tunefleet.samplers"]`` ``mine =
"my_pkg.sampler:ENTRY"``), or :func:`register` in-process. Names come only from this table: a
job spec naming anything else is refused, never imported.
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from orchestrator.errors import JobSpecError
from search_spaces import plugins
from search_spaces.space import DeviceLimits, Space
from search_spaces.spec import KernelSpec

if TYPE_CHECKING:  # Optuna loads when a sampler is made, not when a job spec is checked
    from optuna.distributions import BaseDistribution
    from optuna.samplers import BaseSampler
    from optuna.study import Study
    from optuna.trial import FrozenTrial

    from orchestrator.study.encoding import Encoding
    from orchestrator.study.samplers.learned import PriorTrial

ENTRY_POINT_GROUP = "tunefleet.samplers"
DEFAULT = "learned"


@dataclass(frozen=True)
class SamplerContext:
    """What a factory may use to build the sampler of one study. ``kernel``, ``problem`` and
    ``device_class`` are None where the caller has none (a benchmark on a landscape of an
    unshipped kernel); fields may be added, so factories read them by name."""

    seed: int
    budget: int
    encoding: Encoding
    kernel: KernelSpec | None = None
    problem: Mapping[str, object] = field(default_factory=dict)
    device_class: str | None = None
    #: The same kernel version's ok trials elsewhere (orchestrator/run/prior.py reads them from the
    #: database); empty where the caller has none.
    prior: Sequence[PriorTrial] = ()


SamplerFactory = Callable[[SamplerContext], "BaseSampler"]


class WholeTrialSampler(Protocol):
    """A sampler that gives every parameter of a new trial at once. ``trial`` is a RUNNING
    trial with no params that is not in the study yet (number -1): the caller creates the
    trial with the params returned, in one storage write (:meth:`SearchStudy.ask
    <orchestrator.study.search.SearchStudy.ask>`), instead of Optuna's ask and a suggest per
    parameter. The params must be what Optuna's ask would give with the sampler's
    distributions fixed (:func:`whole_trial`)."""

    def sample_trial(self, study: Study, trial: FrozenTrial) -> dict[str, Any]: ...


def gives_whole_trials(sampler: object) -> TypeGuard[WholeTrialSampler]:
    """Whether ``sampler`` is a :class:`WholeTrialSampler` (it has ``sample_trial``; a look-up,
    not ``isinstance`` on a runtime protocol, which costs tens of microseconds per ask)."""
    return callable(getattr(sampler, "sample_trial", None))


def asked_every_config(sampler: object) -> bool:
    """Whether ``sampler`` says it has asked every valid config of its space (a sampler may
    have ``asked_every_config() -> bool``; one without it never says so): the study then knows
    it is exhausted without asking further."""
    told = getattr(sampler, "asked_every_config", None)
    return callable(told) and bool(told())


def share(sampler: object, trials: Sequence[PriorTrial]) -> None:
    """Give ``sampler`` ``trials`` measured elsewhere since its study began (a sampler may have
    ``share(trials)``; one without it ignores them)."""
    take = getattr(sampler, "share", None)
    if callable(take):
        take(trials)


def whole_trial(
    sampler: BaseSampler,
    study: Study,
    trial: FrozenTrial,
    distributions: Mapping[str, BaseDistribution],
) -> dict[str, Any]:
    """Every parameter of ``distributions`` for a new ``trial`` as Optuna's ask makes them:
    ``sampler``'s relative sample, and for each parameter it leaves out (or out of range) an
    independent draw, in distribution order."""
    relative = sampler.sample_relative(study, trial, dict(distributions))
    out: dict[str, Any] = {}
    for name, dist in distributions.items():
        value = relative.get(name)
        if name not in relative or not dist._contains(dist.to_internal_repr(value)):
            value = sampler.sample_independent(study, trial, name, dist)
        out[name] = dist.to_external_repr(dist.to_internal_repr(value))
    return out


@functools.cache
def one_blas_thread() -> None:
    """Limit numpy's BLAS to one thread in this process, once. The samplers' matrices are small
    (``local``'s fit: one row and column per parameter value; ``learned``'s GP: at most 128 own
    trials by 512 configs), so more threads only contend, worst in a server whose drivers share
    one process: OpenBLAS's threads took about a fifth of its CPU in the reference fleet run, and
    ``learned``'s fleet rate went 179.9 -> 298.0 trials/s with one."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


#: ``(space, limits) -> None`` if the sampler can search the space on the device, else why not.
Fits = Callable[[Space, DeviceLimits], str | None]


def fits_any(space: Space, limits: DeviceLimits) -> str | None:
    """Every space fits."""
    return None


@dataclass(frozen=True)
class SamplerEntry:
    """One registered sampler (see the module docstring); ``numeric``: every parameter is
    encoded as an index (CMA-ES needs numbers); ``requires``: importable modules it needs;
    ``prior``: it reads :attr:`SamplerContext.prior` (the driver then fills it from the database)
    and takes the trials of the study's siblings in the job as they land (:func:`share`)."""

    name: str
    factory: SamplerFactory
    help: str
    numeric: bool = False
    fits: Fits = fits_any
    requires: tuple[str, ...] = ()
    prior: bool = False

    def missing(self) -> str | None:
        """The first module of ``requires`` that is not installed, else None."""
        return next((m for m in self.requires if importlib.util.find_spec(m) is None), None)

    def encoding(self, space: Space, limits: DeviceLimits) -> Encoding:
        """The encoding this sampler searches ``space`` in on ``limits``."""
        from orchestrator.study.encoding import Encoding

        return Encoding(space, limits, numeric_only=self.numeric)

    def make(self, context: SamplerContext) -> BaseSampler:
        """The Optuna sampler for one study (Optuna's experimental warnings silenced)."""
        import optuna

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return self.factory(context)


def startup_trials(budget: int) -> int:
    """Random trials before a model-based sampler takes over: a quarter of the budget, 3 to 10."""
    return max(3, min(10, budget // 4))


def _local(c: SamplerContext) -> BaseSampler:
    from orchestrator.study.samplers.local import LocalSearchSampler

    enc = c.encoding
    return LocalSearchSampler(
        enc.distributions(), c.seed, startup_trials(c.budget), positions=enc.valid_positions
    )


def _tpe(c: SamplerContext) -> BaseSampler:
    import optuna

    return optuna.samplers.TPESampler(
        seed=c.seed,
        multivariate=True,
        constant_liar=True,
        n_startup_trials=startup_trials(c.budget),
    )


def _gp(c: SamplerContext) -> BaseSampler:
    import optuna

    return optuna.samplers.GPSampler(seed=c.seed, n_startup_trials=startup_trials(c.budget))


def _random(c: SamplerContext) -> BaseSampler:
    import optuna

    return optuna.samplers.RandomSampler(seed=c.seed)


def _grid(c: SamplerContext) -> BaseSampler:
    from orchestrator.study.samplers.grid import AskTellGridSampler

    return AskTellGridSampler(c.encoding.grid(), seed=c.seed)


def _cmaes(c: SamplerContext) -> BaseSampler:
    import optuna

    return optuna.samplers.CmaEsSampler(seed=c.seed, n_startup_trials=startup_trials(c.budget))


def _learned(c: SamplerContext) -> BaseSampler:
    from orchestrator.study.samplers.learned import LearnedSampler

    return LearnedSampler(
        c.encoding,
        c.seed,
        problem=dict(c.problem) or None,  # type: ignore[arg-type]
        device_class=c.device_class,
        features=c.kernel.features if c.kernel is not None else None,
        prior=c.prior,
        default=c.kernel.default_for(c.encoding.limits) if c.kernel is not None else None,
    )


BUILTINS: tuple[SamplerEntry, ...] = (
    SamplerEntry(
        "local",
        _local,
        "random startup, then unasked neighbours of the best configs",
    ),
    SamplerEntry("tpe", _tpe, "Optuna's TPE, multivariate, constant liar"),
    SamplerEntry("gp", _gp, "Optuna's Gaussian process"),
    SamplerEntry("random", _random, "uniform over the space"),
    SamplerEntry("grid", _grid, "every config once, in random order"),
    SamplerEntry(
        "cmaes", _cmaes, "Optuna's CMA-ES over parameter indices", numeric=True, requires=("cmaes",)
    ),
    SamplerEntry(
        "learned",
        _learned,
        "local's moves, with every fifth proposal from a Gaussian-process cost model over "
        "config features whose prior comes from the kernel's trials on other problems and "
        "device classes (the default)",
        prior=True,
    ),
)

_registered: dict[str, SamplerEntry] = {}


def register(
    name: str,
    factory: SamplerFactory,
    *,
    help: str,
    numeric: bool = False,
    fits: Fits = fits_any,
    requires: tuple[str, ...] = (),
) -> SamplerEntry:
    """Add a sampler under ``name`` for this process (a built-in or entry point of that name
    is replaced); returns its entry."""
    entry = SamplerEntry(name, factory, help, numeric, fits, requires)
    _registered[name] = entry
    return entry


def _entry_points() -> dict[str, EntryPoint]:
    return plugins.group(ENTRY_POINT_GROUP)


def _load(ep: EntryPoint) -> SamplerEntry:
    try:
        entry = ep.load()
    except Exception as exc:  # an installed plug-in that does not import is its owner's bug
        raise JobSpecError(
            f"sampler entry point {ep.name!r} ({ep.value}) does not import: {exc}"
        ) from None
    if not isinstance(entry, SamplerEntry):
        raise JobSpecError(
            f"sampler entry point {ep.name!r} ({ep.value}) is a {type(entry).__name__}, "
            "not an orchestrator.study.samplers.SamplerEntry"
        )
    if entry.name == ep.name:
        return entry
    return SamplerEntry(
        ep.name, entry.factory, entry.help, entry.numeric, entry.fits, entry.requires
    )


def names() -> list[str]:
    """Sampler names: built-ins, installed entry points and :func:`register`ed ones; the
    default first, then alphabetical. Lists entry points without importing them."""
    known = {e.name for e in BUILTINS} | set(_entry_points()) | set(_registered)
    return sorted(known, key=lambda n: (n != DEFAULT, n))


def get(name: str) -> SamplerEntry:
    """The entry of ``name`` (a :func:`register`ed one, else an entry point, else a built-in:
    the later source wins a name); raises JobSpecError (one line) if the name is unknown, its
    entry point does not load, or a module it needs is missing. Only this name's entry point
    is imported, so a broken plug-in breaks only itself."""
    entry = _registered.get(name)
    if entry is None:
        ep = _entry_points().get(name)
        entry = _load(ep) if ep is not None else next((e for e in BUILTINS if e.name == name), None)
    if entry is None:
        raise JobSpecError(f"unknown sampler {name!r}; choose one of {', '.join(names())}")
    missing = entry.missing()
    if missing is not None:
        raise JobSpecError(f"sampler {name} needs the {missing!r} package: pip install {missing}")
    return entry


def help_text() -> str:
    """One line for ``--sampler``: every name with its help (one that does not load says why)."""
    parts = []
    for name in names():
        try:
            parts.append(f"{name}: {get(name).help}")
        except JobSpecError as exc:
            parts.append(f"{name}: unavailable ({exc})")
    return "; ".join(parts) + "."
