"""A runner that answers trials from recorded landscapes instead of a GPU.

:class:`ReplayRunner` has the trial runner's interface (``run(request) -> Measurement``,
``close()``). It returns each config's recorded outcome and time, optionally with seeded
multiplicative noise; a config absent from the landscape is ``invalid``. A parameter that the
kernel's space gained after the recording is answered for its default value only (the recording
ran with the default). A vendor path (``TrialRequest.vendor``) is answered from the landscape's
vendor times, else ``invalid`` ("no vendor time recorded in the landscape"). Its device class is ``replay:<recorded device name>`` so a replayed time is
never stored as a real measurement.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from search_spaces import get_spec
from search_spaces.device_identity import DeviceClass, normalize_name
from search_spaces.problem import problem_key
from search_spaces.space import Config, DeviceLimits, Vendor, config_key
from workers.device import Backend, Fingerprint
from workers.device_table import find
from workers.landscape import Landscape, LandscapeError, LandscapeResult, read_landscape
from workers.measurement import Measurement, Outcome

#: DeviceLimits fields a recorded fingerprint may carry; used for devices not in the table.
_LIMIT_FIELDS = (
    "shared_mem_per_block",
    "registers_per_block",
    "warp_size",
    "multiprocessors",
    "max_threads_per_block",
)


class TrialLike(Protocol):
    """What a runner needs of a trial request (``workers.runner.TrialRequest`` fits)."""

    @property
    def kernel(self) -> str: ...

    @property
    def problem(self) -> Mapping[str, Any]: ...

    @property
    def config(self) -> Mapping[str, Any]: ...

    @property
    def vendor(self) -> str | None: ...


@dataclass(frozen=True)
class ReplayOptions:
    """``noise``: relative standard deviation of each sample (0 = the recorded times exactly);
    ``delay_s``: seconds each trial takes, to simulate a device's busy time; ``stream``: names an
    independent noise stream of the same seed (a re-timing runner's, as a fresh process on a real
    device times afresh)."""

    noise: float = 0.0
    seed: int = 0
    samples: int = 5
    delay_s: float = 0.0
    stream: str = ""


def _limits(device: Mapping[str, Any], name: str) -> DeviceLimits:
    known = find(name)
    if known is not None and known.arch == device.get("arch", known.arch):
        return known.limits
    try:
        vendor = Vendor(str(device.get("vendor", "nvidia")).lower())
    except ValueError:
        vendor = Vendor.NVIDIA
    # Unknown device: take the recorded limits, else sm_90-like ones (the landscape decides
    # validity anyway: a config it lacks is invalid).
    defaults = {
        "shared_mem_per_block": 227 * 1024,
        "registers_per_block": 65536,
        "warp_size": 64 if vendor is Vendor.AMD else 32,
        "multiprocessors": 132,
        "max_threads_per_block": 1024,
    }
    values = {k: int(device.get(k, defaults[k])) for k in _LIMIT_FIELDS}
    return DeviceLimits(vendor, name, str(device.get("arch", "unknown")), **values)


#: A request's problem key, config key, recorded result (None: why not, the last field).
_Resolved = tuple[str, str, LandscapeResult | None, str | None]


class ReplayRunner:
    """Answers trials from one or more landscapes recorded on the same device."""

    def __init__(self, paths: Sequence[str | Path], options: ReplayOptions | None = None) -> None:
        if not paths:
            raise LandscapeError("a replay runner needs at least one landscape file")
        self.options = options or ReplayOptions()
        if self.options.noise < 0 or self.options.samples < 1 or self.options.delay_s < 0:
            raise LandscapeError("replay noise and delay must be >= 0 and samples >= 1")
        self.landscapes: list[Landscape] = [read_landscape(p) for p in paths]
        names = {ls.device_name for ls in self.landscapes}
        if len(names) != 1:
            raise LandscapeError(
                f"landscapes of one replay device must share a device name; got {sorted(names)}"
            )
        self.device: dict[str, Any] = dict(self.landscapes[0].device)
        arch = self.device.get("arch")
        name = normalize_name(names.pop(), str(arch) if arch else None)
        self.limits = _limits(self.device, name)
        self.fingerprint = Fingerprint(
            vendor=self.limits.vendor,
            name=self.limits.name,
            arch=self.limits.arch,
            memory_bytes=int(self.device.get("memory_bytes", 0)),
            multiprocessors=self.limits.multiprocessors,
            shared_mem_per_block=self.limits.shared_mem_per_block,
            driver=self.device.get("driver"),
            runtime=self.device.get("runtime"),
            triton=self.device.get("triton"),
            torch=self.device.get("torch"),
            backend=Backend.REPLAY,
            index=0,
        )
        self.device_class: DeviceClass = self.fingerprint.device_class
        self._table: dict[tuple[str, str], dict[str, LandscapeResult]] = {}
        self._names: dict[tuple[str, str], set[str]] = {}
        self._vendor: dict[tuple[str, str], dict[str, LandscapeResult]] = {}
        for ls in self.landscapes:
            key = (ls.kernel, ls.problem_key)
            self._table.setdefault(key, {}).update(ls.by_config())
            self._vendor.setdefault(key, {}).update(ls.vendor)
            self._names.setdefault(key, set()).update(n for r in ls.results for n in r.config)
        self._defaults: dict[str, Config | None] = {}
        # (kernel, problem items, config items) of a request the landscapes answer -> its
        # problem key, config key and recorded result: the canonical JSON is computed once per
        # such request, not per call (a simulated fleet replays a thousand trials a second).
        self._found: dict[tuple[object, ...], _Resolved] = {}
        self.calls: list[tuple[str, str, str]] = []

    def _recorded_without_new_params(
        self, request: TrialLike, results: Mapping[str, LandscapeResult]
    ) -> LandscapeResult | None:
        """The recorded result of ``request.config`` less the parameters the recording lacks,
        if each of those has the kernel spec's default value here; else None."""
        names = self._names[(request.kernel, problem_key(request.problem))]
        extra = {k: v for k, v in request.config.items() if k not in names}
        if not extra:
            return None
        if request.kernel not in self._defaults:
            try:
                self._defaults[request.kernel] = get_spec(request.kernel).default_for(self.limits)
            except Exception:  # not a spec this process can load: nothing to compare with
                self._defaults[request.kernel] = None
        default = self._defaults[request.kernel]
        if default is None or any(default.get(k) != v for k, v in extra.items()):
            return None
        return results.get(config_key({k: v for k, v in request.config.items() if k in names}))

    def covers(self, kernel: str, problem: Mapping[str, Any]) -> bool:
        """Whether a landscape for ``kernel`` on ``problem`` is loaded."""
        return (kernel, problem_key(problem)) in self._table

    def answers(self, request: TrialLike) -> bool:
        """Whether a landscape holds ``request``'s config (so :meth:`run` does not answer
        ``invalid`` for lack of it); records no call."""
        return self._resolve(request)[2] is not None

    def keys(self) -> list[tuple[str, str]]:
        """The (kernel, problem key) pairs this runner can answer."""
        return sorted(self._table)

    def _resolve(self, request: TrialLike) -> _Resolved:
        """``request``'s problem and config keys, and its recorded result or why there is none."""
        pkey, ckey = problem_key(request.problem), config_key(request.config)
        results = self._table.get((request.kernel, pkey))
        if results is None:
            return pkey, ckey, None, f"replay has no landscape for {request.kernel} on {pkey}"
        recorded = results.get(ckey) or self._recorded_without_new_params(request, results)
        if recorded is None:
            return pkey, ckey, None, "config is not in the recorded landscape"
        return pkey, ckey, recorded, None

    def run(self, request: TrialLike) -> Measurement:
        """The recorded result of ``request.config``; ``invalid`` if the landscape lacks it."""
        started = time.perf_counter()
        if self.options.delay_s:
            time.sleep(self.options.delay_s)
        if request.vendor is not None:
            return self._run_vendor(request, request.vendor, started)
        memo = (request.kernel, *request.problem.items(), None, *request.config.items())
        found: _Resolved | None
        try:
            found = self._found.get(memo)
        except TypeError:  # an unhashable value: not memoised
            found = None
        if found is None:
            found = self._resolve(request)
            if found[2] is not None:  # only what the landscapes hold: bounded
                with contextlib.suppress(TypeError):
                    self._found[memo] = found
        pkey, ckey, recorded, invalid = found
        self.calls.append((request.kernel, pkey, ckey))
        if recorded is None:
            return Measurement(Outcome.INVALID, error=invalid)
        return self._measured(recorded, f"{request.kernel}|{pkey}|{ckey}", started)

    def _run_vendor(self, request: TrialLike, name: str, started: float) -> Measurement:
        """The landscape's recorded time of the vendor path ``name`` (not counted in
        ``calls``: those are configs)."""
        pkey = problem_key(request.problem)
        recorded = self._vendor.get((request.kernel, pkey), {}).get(name)
        if recorded is None:
            return Measurement(Outcome.INVALID, error="no vendor time recorded in the landscape")
        return self._measured(recorded, f"{request.kernel}|{pkey}|vendor={name}", started)

    def _measured(self, recorded: LandscapeResult, what: str, started: float) -> Measurement:
        """``recorded`` as a measurement, with seeded noise per (seed, stream, ``what``, call
        number): repeatable runs, fresh noise per call and per stream."""
        if recorded.outcome is not Outcome.OK or recorded.time_ms is None:
            return Measurement(recorded.outcome, error="recorded outcome (replay)")
        stream = f"{self.options.stream}|" if self.options.stream else ""
        rng = random.Random(f"{self.options.seed}|{stream}{what}|{len(self.calls)}")
        samples = [
            recorded.time_ms * max(0.01, 1.0 + rng.gauss(0.0, self.options.noise))
            if self.options.noise
            else recorded.time_ms
            for _ in range(self.options.samples)
        ]
        return Measurement(
            Outcome.OK,
            samples_ms=samples,
            compile_s=0.0,
            run_s=time.perf_counter() - started,
            max_rel_error=0.0,
        )

    def close(self) -> None:
        """Nothing to release; present for the runner interface."""
