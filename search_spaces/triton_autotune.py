"""A drop-in for ``@triton.autotune`` that serves tuned configs from tunefleet bundles.

::

    from search_spaces.triton_autotune import autotune

    @autotune(configs=[...], key=["M", "N", "K"], bundle="bundles/")
    @triton.jit
    def matmul_kernel(...): ...

Same arguments as ``triton.autotune``, plus:

* ``bundle``: a bundle file (``tunefleet pull``) or a directory of them; the one for this kernel
  and device class (named as the worker that measured it named it, and matched by
  :func:`search_spaces.device_identity.same_class`) is chosen the first time a key is new. A tree laid out per Triton version
  (``pull --by-stack``) serves from the installed Triton's folder (:mod:`search_spaces.stack`);
* ``versions``: what to do when the bundle was measured under other triton/torch/driver/runtime
  versions (or another kernel source): ``use`` (default), ``refuse`` or ``older`` (see
  :class:`search_spaces.bundle_env.VersionPolicy`); a warning names the difference once;
* ``nearest``: serve the nearest entry (by the key's integer values) for a key the bundle lacks,
  instead of benchmarking the config list as ``triton.autotune`` does;
* ``pinned`` (default: on when ``TUNEFLEET_PINNED=1``): never benchmark at run time. A key the
  bundle lacks follows the nearest entry's decision, else launches the bundle's default, else (no
  bundle serves this kernel) the first config Triton's pruning keeps;
* ``vendor``: the library path to call for keys whose bundle entry chose ``vendor`` (see below);
* ``untuned``: a capture directory where keys the bundle lacks are recorded, so that
  ``tunefleet tune --from-capture`` tunes them next (default ``$TUNEFLEET_CAPTURE``, else
  ``untuned/`` beside the bundle).

A key the bundle lacks is a *miss*: :func:`misses` lists those of this process, each with the
process's rank (:func:`search_spaces.ranks.current_rank`), how it was answered and what was
launched, for the deployment to report or gather; the key is also written to ``untuned``.

A captured kernel has no library path of its own, so a bundle entry that keeps the vendor path
(``backend`` ``vendor``, e.g. ``torch.matmul`` won) is honoured only with ``vendor=``: a callable
that does what the kernel does (writes the same outputs), called instead of the kernel with the
launch's own arguments (``vendor(*args, **kwargs)``, without ``grid``). Without it, such keys
launch the entry's Triton config (the fastest measured) and a warning says so once.

A key in the bundle launches its tuned config with no benchmarking: the config enters Triton's
own per-key cache, so later launches take exactly ``triton.autotune``'s cached path. With a single
config Triton never consults its cache, and neither does this. Importing this module loads
neither torch nor triton; the decorator imports triton when it is applied. With
``TUNEFLEET_CAPTURE`` set, applying the decorator also starts a capture (see
:mod:`search_spaces.triton_capture`).
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from search_spaces import stack
from search_spaces.bundle import Bundle, BundleError, Decision, load_bundle
from search_spaces.bundle_env import VersionPolicy, choose, current_environment
from search_spaces.capture_file import CONFIG_OPTIONS, kernel_name, problem_of
from search_spaces.device_identity import (
    DeviceClass,
    gpu_class,
    interpreter_class,
    same_class,
)
from search_spaces.ranks import current_rank
from search_spaces.triton_capture import (
    ENV_VAR,
    CaptureWriter,
    install_from_env,
    kernel_source,
    source_hash,
    triton_key,
)

UNTUNED_DIR = "untuned"
PINNED_VAR = "TUNEFLEET_PINNED"
#: Keyword arguments a launch passes that are the launch's, not the kernel's.
_LAUNCH_ONLY = frozenset({"grid", "warmup"})


@dataclass(frozen=True)
class Miss:
    """A key the bundle lacks, met on ``rank``: ``how`` it was answered (``nearest``,
    ``default``, or ``none`` when no bundle serves the kernel) and what ran: ``triton`` (a served
    config, not timed), ``vendor`` (the ``vendor=`` callable) or ``tuned`` (Triton benchmarked
    the config list)."""

    rank: int
    kernel: str
    problem: dict[str, Any]
    how: str
    launched: str


_MISSES: list[Miss] = []


def misses(clear: bool = False) -> list[Miss]:
    """The misses of every drop-in kernel of this process, in the order met (and forgotten after
    this call with ``clear``)."""
    found = list(_MISSES)
    if clear:
        del _MISSES[: len(found)]
    return found


def _pinned_from_env() -> bool:
    value = os.environ.get(PINNED_VAR, "").strip()
    if value not in ("", "0", "1"):
        raise BundleError(f"{PINNED_VAR} is {value!r:.40}; set it to 1 (pinned) or 0")
    return value == "1"


def _device_class() -> DeviceClass:
    """The class of this process's device, named as the worker that measured on such a device
    stored it (:func:`device_identity.gpu_class`; ``cpu`` under the interpreter)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return interpreter_class()
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return gpu_class(props, hip=bool(getattr(torch.version, "hip", None)))


def load_bundles(path: str | Path, kernel: str) -> list[Bundle]:
    """The bundles of ``kernel`` in a bundle file or a directory of bundle files; in a stack-laid
    tree (``pull --by-stack``), the folder of the installed Triton (:func:`stack.resolve`)."""
    p = stack.resolve(Path(path))
    files = sorted(p.glob("*.json")) if p.is_dir() else [p]
    found = []
    for file in files:
        try:
            bundle = load_bundle(file)
        except BundleError:
            if not p.is_dir():
                raise
            continue  # a directory may hold other JSON files
        if bundle.kernel == kernel:
            found.append(bundle)
    return found


def _serves(bundle: Bundle, device: DeviceClass) -> bool:
    """Whether ``bundle`` (a loaded one: its class key checked) was measured on ``device``'s
    class (:func:`same_class`); a bundle that names no class serves none."""
    return bool(bundle.device_class) and same_class(bundle.device_class, device)


class Serving:
    """The bundle side of one decorated kernel: picks its bundle once, answers keys, records
    the keys it cannot answer."""

    def __init__(
        self,
        name: str,
        source: str,
        bundle: str | Path | None,
        versions: VersionPolicy,
        nearest: bool,
        untuned: str | Path | None,
        pinned: bool = False,
        vendor: Callable[..., Any] | None = None,
    ) -> None:
        self.name = name
        self.source = source
        self.path = bundle
        self.versions = versions
        self.nearest = nearest
        self.pinned = pinned
        self.vendor = vendor
        #: Key -> whether launches of it call ``vendor`` (filled only when ``vendor`` is given).
        self.routes: dict[tuple[Any, ...], bool] = {}
        self._warned_vendor = False
        if untuned is None and os.environ.get(ENV_VAR):
            untuned = os.environ[ENV_VAR]
        if untuned is None and bundle is not None:
            base = Path(bundle)
            untuned = (base if base.is_dir() else base.parent) / UNTUNED_DIR
        self.writer = CaptureWriter(untuned) if untuned is not None else None
        self._chosen: list[Bundle | None] = []

    def _warn(self, text: str) -> None:
        warnings.warn(f"tunefleet bundle for {self.name}: {text}", RuntimeWarning, stacklevel=5)

    def bundle(self) -> Bundle | None:
        """The bundle this kernel serves from (chosen and warned about once), or None."""
        if self._chosen:
            return self._chosen[0]
        chosen: Bundle | None = None
        if self.path is not None:
            device = _device_class()
            fallback = (
                "launching the first config (pinned)"
                if self.pinned
                else "tuning as triton.autotune does"
            )
            try:
                every = load_bundles(self.path, self.name)
                refused = ""
            except stack.StackError as exc:
                every, refused = [], str(exc)
            mine = [b for b in every if _serves(b, device)]
            if every and not mine:
                self._warn(
                    f"{self.path} has bundles for {', '.join(sorted({b.device_class for b in every}))}"
                    f", none for {device.key}: {fallback}"
                )
            elif not every:
                self._warn(f"{refused or f'{self.path} has no bundle for this kernel'}: {fallback}")
            current = {**current_environment()}
            chosen, diffs = choose(mine, current, self.versions)
            candidate = chosen or (mine[0] if mine else None)
            if candidate is not None and not candidate.kernel_version.startswith(self.source):
                diffs = [*diffs, "kernel source changed since tuning"]
                if self.versions is not VersionPolicy.USE:
                    chosen = None
            if diffs:
                action = "using it" if chosen is not None else "not using it (versions="
                action += "" if chosen is not None else f"{self.versions.value})"
                self._warn(f"measured under other versions ({'; '.join(diffs)}); {action}")
        self._chosen.append(chosen)
        return chosen

    def decide(self, keys: Sequence[str], key: tuple[Any, ...]) -> tuple[str, Decision | None]:
        """How the bundle answers ``key`` (``exact``, ``nearest``, ``default``, or ``none`` without
        a bundle) and the decision to follow: the exact entry's; a nearest entry's with
        ``nearest`` or ``pinned``; the default only when pinned; else None (tune the key)."""
        bundle = self.bundle()
        if bundle is None:
            return "none", None
        decision = bundle.decide(problem_of(keys, key))
        follow = (
            decision.how == "exact" or self.pinned or (self.nearest and decision.how == "nearest")
        )
        return decision.how, decision if follow else None

    def route_to_vendor(self, tuner: Any, key: tuple[Any, ...], named: Mapping[str, Any]) -> bool:
        """Whether launches of ``key`` call the ``vendor`` callable (the decision to follow keeps
        the vendor path); a miss answered so is recorded here."""
        how, decision = self.decide(tuner.keys, key)
        if decision is None or decision.triton:
            return False
        if how != "exact":
            self._miss(tuner, key, named, how, "vendor")
        return True

    def config_for(
        self, tuner: Any, kwargs: Mapping[str, Any], pruned: Callable[[], list[Any]]
    ) -> Any | None:
        """The ``triton.Config`` to launch a new key with, or None to tune it as Triton does;
        ``pruned`` gives Triton's pruned config list (its first is the pinned fallback)."""
        named = {**tuner.nargs, **kwargs}
        key = triton_key(tuner, (), named)
        how, decision = self.decide(tuner.keys, key)
        config = None
        if decision is not None:
            if not decision.triton and not self._warned_vendor:
                self._warned_vendor = True
                self._warn(
                    f"the bundle keeps the vendor path {decision.vendor} for "
                    f"{problem_of(tuner.keys, key)}, and this kernel has none (pass vendor= to "
                    "autotune): launching the entry's Triton config there"
                )
            config = _triton_config(decision.config)
        elif self.pinned:
            config = pruned()[0]
        if how != "exact":
            self._miss(tuner, key, named, how, "tuned" if config is None else "triton")
        return config

    def _miss(
        self, tuner: Any, key: tuple[Any, ...], named: Mapping[str, Any], how: str, launched: str
    ) -> None:
        _MISSES.append(Miss(current_rank(), self.name, problem_of(tuner.keys, key), how, launched))
        self._record(tuner, key, named)

    def _record(self, tuner: Any, key: tuple[Any, ...], named: Mapping[str, Any]) -> None:
        if self.writer is None:
            return
        try:
            self.writer.record(tuner, key, (), named)
        except OSError as exc:
            self._warn(f"cannot record the untuned key in {self.writer.directory}: {exc}")
            self.writer = None


def _triton_config(config: Mapping[str, Any]) -> Any:
    from triton import Config

    options = {k: config[k] for k in CONFIG_OPTIONS if k in config}
    meta = {k: v for k, v in config.items() if k not in CONFIG_OPTIONS}
    return Config(meta, **options)


@functools.cache
def _served_class() -> type:
    from triton.runtime.autotuner import Autotuner

    class ServedAutotuner(Autotuner):
        """Triton's Autotuner whose pruning step asks the bundle first (a new key only), and
        whose launches of keys the bundle gives to the vendor path call ``vendor=`` instead.

        A served config is never timed: Triton 3.9 takes a single pruned config without timing
        it, but 3.6 still times it (on the H200 each served key ran one do_bench), so ``_bench``
        answers for a served config without launching. ``timed`` counts configs really timed.
        """

        serving: Serving
        timed: int = 0
        _served: Any = None

        def run(self, *args: Any, **kwargs: Any) -> Any:
            vendor = self.serving.vendor
            if vendor is not None:
                key = triton_key(self, args, kwargs)
                route = self.serving.routes.get(key)
                if route is None:
                    named = {**dict(zip(self.arg_names, args, strict=False)), **kwargs}
                    route = self.serving.route_to_vendor(self, key, named)
                    self.serving.routes[key] = route
                if route:
                    return vendor(
                        *args, **{k: v for k, v in kwargs.items() if k not in _LAUNCH_ONLY}
                    )
            return super().run(*args, **kwargs)

        def prune_configs(self, kwargs: dict[str, Any]) -> list[Any]:
            tuned = self.serving.config_for(
                self, kwargs, lambda: list(super(ServedAutotuner, self).prune_configs(kwargs))
            )
            if tuned is not None:
                self._served = tuned
                return [tuned]
            return list(super().prune_configs(kwargs))

        def _bench(self, *args: Any, config: Any, **meta: Any) -> Any:
            if config is self._served:
                return [0.0, 0.0, 0.0]  # the quantiles Triton asks for; nothing launched
            self.timed += 1
            return super()._bench(*args, config=config, **meta)

    return ServedAutotuner


def autotune(
    configs: Sequence[Any],
    key: Sequence[str],
    prune_configs_by: dict[str, Any] | None = None,
    reset_to_zero: Sequence[str] | None = None,
    restore_value: Sequence[str] | None = None,
    pre_hook: Callable[..., Any] | None = None,
    post_hook: Callable[..., Any] | None = None,
    warmup: int | None = None,
    rep: int | None = None,
    use_cuda_graph: bool = False,
    do_bench: Callable[..., Any] | None = None,
    cache_results: bool = False,
    *,
    bundle: str | Path | None = None,
    versions: VersionPolicy | str = VersionPolicy.USE,
    nearest: bool = False,
    untuned: str | Path | None = None,
    pinned: bool | None = None,
    vendor: Callable[..., Any] | None = None,
) -> Callable[[Any], Any]:
    """``triton.autotune`` serving tuned configs from ``bundle`` (see the module doc);
    ``pinned`` None reads ``TUNEFLEET_PINNED`` (1 or 0; anything else raises BundleError)."""
    policy = VersionPolicy(versions)
    pin = _pinned_from_env() if pinned is None else pinned

    def decorator(fn: Any) -> Any:
        install_from_env()
        cls = _served_class()
        tuner = cls(
            fn,
            fn.arg_names,
            list(configs),
            list(key),
            reset_to_zero,
            restore_value,
            pre_hook=pre_hook,
            post_hook=post_hook,
            prune_configs_by=prune_configs_by,
            warmup=warmup,
            rep=rep,
            use_cuda_graph=use_cuda_graph,
            do_bench=do_bench,
            cache_results=cache_results,
        )
        base = tuner.base_fn
        try:
            import inspect

            file: str | None = inspect.getsourcefile(base)
        except TypeError:
            file = None
        tuner.serving = Serving(
            kernel_name(base.__module__, base.__qualname__, file),
            source_hash(kernel_source(base))[:8],
            bundle,
            policy,
            nearest,
            untuned,
            pin,
            vendor,
        )
        return tuner

    return decorator
