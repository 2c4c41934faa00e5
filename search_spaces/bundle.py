"""Deployment-side lookup of tuned configs from a ``tunefleet pull`` bundle (stdlib only).

A bundle is JSON::

    {"format": "tunefleet-bundle/1", "kernel": "matmul", "kernel_version": "...",
     "device_class": "NVIDIA H200", "environment": {...}, "default": {config},
     "entries": [{"problem": {...}, "backend": "triton", "config": {...}, "time_ms": 0.41,
                  "triton_ms": 0.41, "vendor": "torch.matmul", "vendor_ms": 0.44,
                  "noise": 0.01, "job": 7, "team": "ml",
                  "updated_at": "2025-06-01T12:00:00+00:00"}, ...],
     "digest": "sha256 hex"}

``device_class`` is the key of the class it was measured on
(:mod:`search_spaces.device_identity`; a file whose key cannot be one is refused), and a
deployment picks the bundle of its own device with :func:`~search_spaces.device_identity.same_class`.

Each entry says which backend wins its problem: ``triton`` (launch ``config``) or ``vendor``
(keep the library path named by ``vendor``; ``config`` is then the fastest Triton config
measured, for callers that must launch Triton anyway); an entry without ``backend`` is
``triton``. ``triton_ms``/``vendor_ms`` are the two times of the final paired re-timing and
``noise`` its relative noise floor. ``updated_at`` (optional, ISO 8601) is when the entry's
measurement last changed, and ``"cancelled": true`` marks an entry whose job was cancelled (its
fastest trial so far, not re-timed). ``digest`` (optional) is the SHA-256 of the document without
it (:func:`bundle_digest`); a file whose digest does not match its content is refused.

:meth:`Bundle.lookup` picks, for a problem:

1. the entry whose problem equals it exactly (same fields, same values);
2. else the *nearest* entry among those whose non-integer fields (dtype, flags, choices) all equal
   the problem's and that have the same field names (:func:`search_spaces.problem.problem_distance`:
   sum over integer fields of ``|log2(a) - log2(b)|``, so 2048 is as far from 4096 as 4096 from
   8192); of equally near entries, one whose decision is ``vendor`` first (a tie never carries a
   Triton kernel to a shape that a vendor win is as near), then the one listed first;
3. else the bundle's ``default`` (the kernel spec's default config for the device's vendor).

:meth:`Bundle.decide` follows the same rule and returns the whole :class:`Decision` (backend,
config, vendor path); the default is ``triton`` with the default config. A nearest entry's
``triton`` decision carries over only to a problem that differs from it in ``batch_fields`` alone
(the fields that grow with a deployment's batch or sequence, such as matmul's ``M``, written by
``tunefleet pull``): a problem with other weights or model dims (another ``N`` or ``K``) was never
compared with the vendor path, so where the entry's study measured one it keeps that vendor path
(the entry's, else the one the bundle's other entries name). A bundle
without ``batch_fields`` (written before the key) carries every nearest decision over. :func:`tuned` and
:func:`search_spaces.dispatch.launcher_for` follow it (the vendor path where it won).

Answers are cached per problem, so a repeated :meth:`Bundle.resolve` is one tuple and one dict
access. On a launch path, :meth:`Bundle.table` is cheaper still: a dict keyed by the problem's
values in a fixed field order (built from the launch's shapes, no dict or string per call), whose
values can be what the caller makes of a config once (launch keyword arguments, say), so a hit is a
single dict access. Importing this module loads neither torch, triton, Ray, Optuna nor SQLAlchemy.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from search_spaces.device_identity import DeviceClass, DeviceIdentityError
from search_spaces.errors import SpecError
from search_spaces.problem import problem_distance

if TYPE_CHECKING:
    from search_spaces.spec import KernelSpec

BUNDLE_FORMAT = "tunefleet-bundle/1"
#: The backends an entry may name.
BACKENDS = ("triton", "vendor")

ProblemLike = Mapping[str, Any]
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class BundleError(SpecError):
    """A bundle file is missing, unreadable or not in the ``tunefleet-bundle/1`` format."""


def _frozen(problem: ProblemLike) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(problem.items()))


@dataclass(frozen=True)
class BundleEntry:
    """The decision for one problem: its backend (``triton`` or ``vendor``), the Triton config,
    the time of the chosen backend, both backends' times and the noise floor of the re-timing
    that compared them, and the job and team that produced it."""

    problem: dict[str, Any]
    config: dict[str, Any]
    time_ms: float | None = None
    job: int | None = None
    backend: str = "triton"
    vendor: str | None = None
    triton_ms: float | None = None
    vendor_ms: float | None = None
    noise: float | None = None
    team: str | None = None
    updated_at: str | None = None
    cancelled: bool = False


def nearest_rank(distance: float, entry: BundleEntry) -> tuple[float, bool]:
    """How near ``entry`` is, ``distance`` from a problem, as the nearest-entry lookup ranks it
    (lower first): of equally near entries a vendor win first, so a tie never puts a Triton kernel
    where a vendor path won as near. At distance 0 (an equal problem: the exact lookup's, the
    first listed) the backend does not count."""
    return distance, distance > 0 and entry.backend == "triton"


@dataclass(frozen=True)
class Decision:
    """What a deployment does for a problem: ``backend`` ``triton`` launches ``config``;
    ``vendor`` keeps the library path ``vendor`` (``config`` is still the best Triton config).
    ``how`` says how the entry was found: ``exact``, ``nearest`` or ``default``."""

    backend: str
    config: dict[str, Any]
    vendor: str | None
    how: str

    @property
    def triton(self) -> bool:
        return self.backend == "triton"


@dataclass
class Bundle:
    """Tuned configs of one kernel version on one device class; see the module doc for lookup."""

    kernel: str
    kernel_version: str
    device_class: str
    default: dict[str, Any]
    entries: list[BundleEntry]
    environment: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    #: SHA-256 of the document the bundle was read from (:func:`bundle_digest`); "" when built
    #: in memory.
    digest: str = ""
    #: The problem fields that grow with a deployment's batch or sequence; None when the bundle
    #: does not say (see the module doc).
    batch_fields: tuple[str, ...] | None = None
    _exact: dict[tuple[tuple[str, Any], ...], BundleEntry] = field(
        init=False, repr=False, default_factory=dict
    )
    _cache: dict[tuple[tuple[str, Any], ...], tuple[str, dict[str, Any]]] = field(
        init=False, repr=False, default_factory=dict
    )
    _decisions: dict[tuple[tuple[str, Any], ...], Decision] = field(
        init=False, repr=False, default_factory=dict
    )
    #: The vendor path the entries name (the first that names one), for decision_from.
    _vendor: str | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        for entry in self.entries:
            self._exact.setdefault(_frozen(entry.problem), entry)
        self._vendor = next((e.vendor for e in self.entries if e.vendor), None)

    def _nearest(self, problem: ProblemLike) -> BundleEntry | None:
        """The entry nearest ``problem`` by :func:`nearest_rank`, the first listed of equals."""
        best: tuple[float, bool, BundleEntry] | None = None
        for entry in self.entries:
            distance = problem_distance(problem, entry.problem)
            rank = nearest_rank(distance, entry)
            if math.isfinite(distance) and (best is None or rank < best[:2]):
                best = (*rank, entry)
        return None if best is None else best[2]

    def _entry_for(self, problem: ProblemLike) -> tuple[str, BundleEntry | None]:
        exact = self._exact.get(_frozen(problem))
        if exact is not None:
            return "exact", exact
        near = self._nearest(problem)
        return ("nearest", near) if near is not None else ("default", None)

    def resolve(self, problem: ProblemLike) -> tuple[str, dict[str, Any]]:
        """``(how, config)`` for ``problem``; ``how`` is ``exact``, ``nearest`` or ``default``.

        Cached by the problem's items in their own order (no sort on a hit): the same problem
        given with its fields in another order is resolved once more, to the same answer."""
        hit = self._cache.get(tuple(problem.items()))
        if hit is not None:
            return hit
        how, entry = self._entry_for(problem)
        hit = (how, entry.config if entry is not None else self.default)
        self._cache[tuple(problem.items())] = hit
        return hit

    def decide(self, problem: ProblemLike) -> Decision:
        """The :class:`Decision` for ``problem``: the exact entry's, else the nearest entry's,
        else ``triton`` with the default config; cached like :meth:`resolve`."""
        hit = self._decisions.get(tuple(problem.items()))
        if hit is not None:
            return hit
        how, entry = self._entry_for(problem)
        hit = (
            Decision("triton", self.default, None, how)
            if entry is None
            else self.decision_from(problem, entry, how)
        )
        self._decisions[tuple(problem.items())] = hit
        return hit

    def decision_from(self, problem: ProblemLike, entry: BundleEntry, how: str) -> Decision:
        """What ``entry``'s decision means for ``problem`` found by ``how`` (``exact`` or
        ``nearest``): its own, except a ``triton`` one reached across other fields than
        ``batch_fields`` where the entry's study measured a vendor path (the module doc)."""
        if (
            how == "nearest"
            and entry.backend == "triton"
            and (entry.vendor is not None or entry.vendor_ms is not None)
            and not self._same_weights(problem, entry.problem)
        ):
            return Decision("vendor", entry.config, entry.vendor or self._vendor, how)
        return Decision(entry.backend, entry.config, entry.vendor, how)

    def _same_weights(self, problem: ProblemLike, other: ProblemLike) -> bool:
        """Whether the two problems differ in ``batch_fields`` alone (True without them)."""
        if self.batch_fields is None:
            return True
        return all(
            problem.get(name) == other.get(name)
            for name in set(problem) | set(other)
            if name not in self.batch_fields
        )

    def lookup(self, problem: ProblemLike) -> dict[str, Any]:
        """The config to launch ``problem`` with (exact, else nearest, else default); a copy."""
        return dict(self.resolve(problem)[1])

    def table(
        self, fields: tuple[str, ...], prepare: Callable[[dict[str, Any]], T] | None = None
    ) -> BundleTable[T]:
        """A :class:`BundleTable`: ``table[(v1, v2, ...)]``, values in ``fields`` order, is
        ``prepare(config)`` for the problem ``dict(zip(fields, values))`` (the config itself
        without ``prepare``), ``prepare`` called once per distinct config."""
        return BundleTable(self, fields, prepare)

    def decision_table(
        self, fields: tuple[str, ...], prepare: Callable[[Decision], T] | None = None
    ) -> BundleTable[T]:
        """Like :meth:`table`, with ``prepare(decision)`` (the :class:`Decision` itself without
        ``prepare``) as values: what a launch path that may keep the vendor path needs."""
        return BundleTable(self, fields, prepare, decisions=True)


class BundleTable(dict[tuple[Any, ...], T], Generic[T]):
    """What :meth:`Bundle.table` returns: a dict from problem values (in ``fields`` order) to the
    prepared config. A hit is a plain dict access; a miss resolves the problem through the bundle,
    stores the answer and records how it was found in ``how`` (exact, nearest or default)."""

    def __init__(
        self,
        bundle: Bundle,
        fields: tuple[str, ...],
        prepare: Callable[[Any], T] | None = None,
        decisions: bool = False,
    ) -> None:
        super().__init__()
        if len(set(fields)) != len(fields) or not fields:
            raise BundleError(f"table fields {fields!r}: give each problem field once")
        self.bundle = bundle
        self.fields = fields
        self.how: dict[tuple[Any, ...], str] = {}
        self._prepare = prepare
        self._decisions = decisions
        self._prepared: dict[int, tuple[Any, T]] = {}
        self._interned_decisions: dict[tuple[str, int, str | None], Decision] = {}

    def __missing__(self, key: tuple[Any, ...]) -> T:
        if len(key) != len(self.fields):
            raise BundleError(
                f"{self.bundle.kernel} table key {key!r}: give one value per field of "
                f"{', '.join(self.fields)}"
            )
        problem = dict(zip(self.fields, key, strict=True))
        answer: Any
        if self._decisions:
            decision = self.bundle.decide(problem)
            how = decision.how
            answer = self._interned(
                Decision(decision.backend, decision.config, decision.vendor, "table")
            )
        else:
            how, answer = self.bundle.resolve(problem)
        # Keyed by identity: resolve returns the bundle's own config objects (decisions are
        # interned); the answer is kept beside its prepared value so that its id stays its own.
        known = self._prepared.get(id(answer))
        if known is None:
            made: Any = answer if self._prepare is None else self._prepare(answer)
            known = self._prepared[id(answer)] = (answer, made)
        value: T = known[1]
        self[key] = value
        self.how[key] = how
        return value

    def _interned(self, decision: Decision) -> Decision:
        """One Decision object per (backend, config object, vendor), so that the prepared value
        of a decision is made once however many problems share it."""
        ident = (decision.backend, id(decision.config), decision.vendor)
        return self._interned_decisions.setdefault(ident, decision)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_config(config: Mapping[str, Any], what: str, spec: KernelSpec | None) -> None:
    """Raise BundleError unless ``config`` is a non-empty map of parameter names to integers,
    flags or labels (and, with ``spec``, of its parameters to values they allow). Without
    ``spec`` a name must still be one a kernel can take as a keyword (an identifier, not a
    dunder); only the spec tells a foreign identifier."""
    if not config:
        raise BundleError(f"{what} is empty; a tuned config names at least one parameter")
    for name, value in config.items():
        if not name.isidentifier() or name.startswith("__"):
            raise BundleError(f"{what} names {name[:80]!r}, which is not a parameter name")
        if not isinstance(value, int | str):  # bool is an int
            raise BundleError(
                f"{what}[{name!r}] is {value!r}; a config value is an integer, a flag or a label"
            )
    if spec is None:
        return
    params = {p.name: p for p in spec.space.params}
    for name, value in config.items():
        param = params.get(name)
        if param is None:
            raise BundleError(
                f"{what} names {name!r}, which kernel {spec.name!r} does not have "
                f"(its parameters: {', '.join(params)})"
            )
        if not any(value == v and type(value) is type(v) for v in param.values):
            allowed = ", ".join(map(str, param.values))
            raise BundleError(f"{what}[{name!r}] = {value!r} is not one of {allowed}")


def _check_problem(
    problem: Mapping[str, Any], what: str, spec: KernelSpec | None, kinds: dict[str, type]
) -> None:
    """Raise BundleError unless ``problem`` is a non-empty map of field names to positive integer
    dims, flags or labels, each field of one kind across the bundle (``kinds``, filled here);
    with ``spec``, one its schema accepts. A label of digits (``"128"``) is a dim written as
    text, refused even without ``spec``."""
    if not problem:
        raise BundleError(f"{what} is empty")
    for name, value in problem.items():
        if isinstance(value, bool):
            kind: type = bool
        elif _is_int(value):
            if value <= 0:
                raise BundleError(f"{what}[{name!r}] = {value}; a dim is a positive integer")
            kind = int
        elif isinstance(value, str):
            if value.strip().isdigit():
                raise BundleError(f"{what}[{name!r}] is {value!r}; a dim is an integer, not text")
            kind = str
        else:
            raise BundleError(
                f"{what}[{name!r}] is {value!r}; a problem field is a positive integer dim, "
                "a flag or a label"
            )
        seen = kinds.setdefault(name, kind)
        if seen is not kind:
            raise BundleError(
                f"{what}[{name!r}] is {value!r} ({kind.__name__}), but other entries give "
                f"{name!r} as {seen.__name__}"
            )
    if spec is not None:
        try:
            spec.validate_problem(problem)
        except SpecError as exc:
            raise BundleError(f"{what}: {exc}") from None


def _check_environment(environment: object, where: str) -> dict[str, Any]:
    if environment is None:
        return {}
    if not isinstance(environment, Mapping) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str | int | float))
        for k, v in environment.items()
    ):
        raise BundleError(
            f"{where}: 'environment' must be an object of names to strings or numbers, "
            f"got {environment!r:.80}"
        )
    return dict(environment)


def _entry(raw: object, what: str, spec: KernelSpec | None, kinds: dict[str, type]) -> BundleEntry:
    if not isinstance(raw, Mapping) or not all(
        isinstance(raw.get(k), Mapping) for k in ("problem", "config")
    ):
        raise BundleError(f"{what} needs 'problem' and 'config' objects")
    _check_problem(raw["problem"], f"{what}.problem", spec, kinds)
    _check_config(raw["config"], f"{what}.config", spec)
    time_ms, job = raw.get("time_ms"), raw.get("job")
    if time_ms is not None and not (
        isinstance(time_ms, int | float)
        and not isinstance(time_ms, bool)
        and math.isfinite(time_ms)
        and time_ms > 0
    ):
        raise BundleError(f"{what}.time_ms is {time_ms!r}; a time is a positive number of ms")
    if job is not None and not _is_int(job):
        raise BundleError(f"{what}.job is {job!r}; a job is an integer id")
    backend = raw.get("backend", "triton")
    if backend not in BACKENDS:
        raise BundleError(
            f"{what}.backend is {backend!r}; a backend is one of {', '.join(BACKENDS)} "
            "(pull the bundle again with this tunefleet)"
        )
    vendor, team = raw.get("vendor"), raw.get("team")
    for name, value in (("vendor", vendor), ("team", team)):
        if value is not None and not isinstance(value, str):
            raise BundleError(f"{what}.{name} is {value!r}; expected a string")
    if backend == "vendor" and not vendor:
        raise BundleError(f"{what} says backend 'vendor' but names no 'vendor' path")
    updated_at, cancelled = raw.get("updated_at"), raw.get("cancelled", False)
    if updated_at is not None and not _is_time(updated_at):
        raise BundleError(f"{what}.updated_at is {updated_at!r}; expected an ISO 8601 time")
    if not isinstance(cancelled, bool):
        raise BundleError(f"{what}.cancelled is {cancelled!r}; expected true or false")
    times = {}
    for name in ("triton_ms", "vendor_ms", "noise"):
        value = raw.get(name)
        if value is not None and not (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value >= 0
        ):
            raise BundleError(f"{what}.{name} is {value!r}; expected a non-negative number")
        times[name] = None if value is None else float(value)
    return BundleEntry(
        dict(raw["problem"]),
        dict(raw["config"]),
        time_ms,
        job,
        backend=backend,
        vendor=vendor,
        team=team,
        updated_at=updated_at,
        cancelled=cancelled,
        **times,
    )


def _is_time(value: object) -> bool:
    """An ISO 8601 date and time with its UTC offset."""
    if not isinstance(value, str):
        return False
    try:
        return datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def bundle_digest(data: Mapping[str, Any]) -> str:
    """SHA-256 hex of a bundle document without its ``digest`` key (canonical JSON: sorted keys,
    no spaces), so equal content gives the same digest on every rank and machine."""
    body = {k: v for k, v in data.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def bundle_from_dict(data: object, where: str = "bundle", spec: KernelSpec | None = None) -> Bundle:
    """Check and convert a decoded bundle document; raises BundleError naming the fault and the
    entry it is in.

    Every entry is checked: its problem (positive integer dims, flags, labels; each field of
    one kind in every entry), its config (non-empty; integers, flags, labels: never NaN, inf or
    null), its time and job. ``spec``, when the kernel is known, also checks the bundle is its,
    every config parameter is one it has with a value it allows, and every problem fits its
    schema.
    """
    if not isinstance(data, Mapping):
        raise BundleError(f"{where}: expected a JSON object")
    if data.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{where}: format is {data.get('format')!r}, expected {BUNDLE_FORMAT!r}")
    if not isinstance(data.get("kernel"), str) or not isinstance(data.get("default"), Mapping):
        raise BundleError(f"{where}: needs a 'kernel' string and a 'default' config object")
    if spec is not None and data["kernel"] != spec.name:
        raise BundleError(
            f"{where}: the bundle is for kernel {data['kernel']!r}, not {spec.name!r}"
        )
    for name in ("kernel_version", "device_class"):
        if not isinstance(data.get(name, ""), str):
            raise BundleError(f"{where}: {name!r} must be a string, got {data[name]!r}")
    if data.get("device_class"):
        try:
            DeviceClass.parse(data["device_class"])
        except DeviceIdentityError as exc:
            raise BundleError(f"{where}: {exc}") from None
    _check_config(data["default"], f"{where}: default", spec)
    environment = _check_environment(data.get("environment"), where)
    raw_entries = data.get("entries")
    if not isinstance(raw_entries, list):
        raise BundleError(f"{where}: 'entries' must be a list")
    kinds: dict[str, type] = {}
    entries = [
        _entry(raw, f"{where}: entries[{i}]", spec, kinds) for i, raw in enumerate(raw_entries)
    ]
    digest = bundle_digest(data)
    stated = data.get("digest")
    if stated is not None and stated != digest:
        raise BundleError(
            f"{where}: its digest {str(stated)[:16]}... does not match its content "
            f"({digest[:16]}...); the file was changed after `tunefleet pull`: pull it again"
        )
    batch_fields = data.get("batch_fields")
    if batch_fields is not None and (
        not isinstance(batch_fields, list) or not all(isinstance(f, str) for f in batch_fields)
    ):
        raise BundleError(f"{where}: 'batch_fields' must be a list of field names")
    known = {
        "format",
        "kernel",
        "kernel_version",
        "device_class",
        "environment",
        "default",
        "entries",
        "digest",
        "batch_fields",
    }
    return Bundle(
        kernel=data["kernel"],
        kernel_version=data.get("kernel_version", ""),
        device_class=data.get("device_class", ""),
        default=dict(data["default"]),
        entries=entries,
        environment=environment,
        meta={k: v for k, v in data.items() if k not in known},
        digest=digest,
        batch_fields=None if batch_fields is None else tuple(batch_fields),
    )


def load_bundle(path: str | Path, spec: KernelSpec | None = None) -> Bundle:
    """Read and check (see :func:`bundle_from_dict`; ``spec`` when the kernel is known) a bundle
    file written by ``tunefleet pull``; raises BundleError."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise BundleError(f"bundle {p} does not exist; create it with `tunefleet pull`") from None
    except (OSError, ValueError) as exc:
        raise BundleError(f"cannot read bundle {p}: {exc}") from None
    return bundle_from_dict(data, str(p), spec)


def tuned(
    bundle: str | Path | Bundle,
    key: Callable[..., ProblemLike],
    vendor: Callable[..., Any] | None = None,
) -> Callable[[F], F]:
    """Decorator: call the function with the bundle's config for ``key(*args, **kwargs)`` as kwargs.

    With ``vendor`` (the library path the deployment runs without the bundle), a problem whose
    :class:`Decision` is ``vendor`` calls ``vendor(*args, **kwargs)`` instead; without it, such a
    problem gets its entry's config (the fastest Triton config measured for it). The bundle file
    is read on the first call, not at decoration time. Keyword arguments the caller passes
    explicitly win over the bundle's config.
    """
    loaded: list[Bundle] = [bundle] if isinstance(bundle, Bundle) else []

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not loaded:
                loaded.append(load_bundle(bundle))  # type: ignore[arg-type]
            decision = loaded[0].decide(key(*args, **kwargs))
            if vendor is not None and decision.backend == "vendor":
                return vendor(*args, **kwargs)
            return fn(*args, **{**decision.config, **kwargs})

        return wrapper  # type: ignore[return-value]

    return decorate
