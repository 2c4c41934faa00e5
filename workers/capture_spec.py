"""Kernel specs built from a capture: tune an app's ``@triton.autotune`` kernel with no hand-written spec.

A :class:`CaptureSpec` takes everything from a capture directory (see
:mod:`search_spaces.capture_file`):

* problems: one per captured key (the key arguments by name plus the tensor dtypes);
* inputs: fresh random tensors with the captured shapes, dtypes, strides and offsets; scalars and
  constexprs as captured. Integer tensors (often indices into other tensors) need their values in
  the capture directory's ``overrides.json``; so does an argument of a type the capture could not
  describe;
* space: the kernel's own config list, or with ``widen`` the product of each parameter's observed
  values and their neighbours (:func:`search_spaces.capture_file.widened_values`), filtered by
  the device's thread limit and by the grid values the capture could evaluate;
* output: the tensor arguments the kernel writes, found by launching once on a copy of the inputs
  (or named in ``overrides.json``); the first one is checked;
* correctness: the output of the first config of the kernel's list that runs, on the same inputs.
  Configs are checked against each other, never against the mathematics.

Building a spec reads files only. Its tensor methods import the app's module by the name the
capture recorded, which runs the app's code: that is why a capture is tuned from the command line
by its owner, and never on a server's word (the server allow-lists the modules it imports).

Specs are reached through the registry by a path-free reference, ``captured:<name>@<source
hash>[+wide]`` (:mod:`search_spaces.capture_refs`), which :func:`captured_spec` resolves through
the local capture index: every process on the machine (driver, Ray workers, trial processes) builds
the same spec. References of the old form, ``workers.capture_spec:list_<token>`` or ``wide_``
(a token of the directory's absolute path), are refused in one line naming the new reference.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.util
import itertools
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from search_spaces.capture_file import (
    CONFIG_OPTIONS,
    CapturedKernel,
    CapturedLaunch,
    CaptureError,
    is_pow2,
    read_capture,
    widened_values,
)
from search_spaces.capture_refs import captures_of, indexed_directories, parse_ref, ref_of
from search_spaces.problem import Field, FieldKind, Problem, ProblemSchema, problem_key
from search_spaces.space import (
    Config,
    Constraint,
    DeviceLimits,
    Param,
    ParamKind,
    Space,
    Value,
    Vendor,
    config_key,
)
from search_spaces.spec import DEFAULT_TOLERANCE, Inputs, KernelSpec, Launcher

OVERRIDES_FILE = "overrides.json"
INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
_OLD_REF_PREFIX = {False: "list_", True: "wide_"}
_LAUNCH = "_launch"
_REFERENCE = "_reference"
_PRISTINE = "_pristine_"


def ref_for(directory: str | Path, kernel: str, widen: bool) -> str:
    """The path-free reference (``captured:<name>@<hash>[+wide]``) of a kernel in a capture."""
    return ref_of(_find(directory, kernel), widen)


def __getattr__(name: str) -> KernelSpec:
    """Refuse an old path-encoding reference (the registry's ``getattr`` on this module), naming
    the reference that replaced it when its capture is still readable."""
    for widen, prefix in _OLD_REF_PREFIX.items():
        if name.startswith(prefix):
            token = name.removeprefix(prefix)
            try:
                raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
                directory, kernel = json.loads(raw)
                new = ref_for(str(directory), str(kernel), widen)
            except (ValueError, TypeError, CaptureError):
                new = "the one `tunefleet capture --refs DIR` prints"
            raise CaptureError(
                f"{__name__}:{name[:24]}... is an old captured-kernel reference (it named a "
                f"path); use {new}"
            )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ArgOverride:
    """How to fill one tensor argument: ``randint`` [low, high), ``fill`` value or ``arange``."""

    randint: tuple[int, int] | None = None
    fill: float | None = None
    arange: bool = False


@dataclass(frozen=True)
class KernelOverrides:
    """A kernel's entry in ``overrides.json``: argument fills and the output buffers' names."""

    args: dict[str, ArgOverride] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()


def _override(kernel: CapturedKernel, arg: str, raw: object, where: str) -> ArgOverride:
    if arg not in kernel.arg_names:
        raise CaptureError(f"{where}: {kernel.name} has no argument {arg!r}")
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise CaptureError(
            f'{where}: {arg} needs one of {{"randint": [low, high]}}, {{"fill": value}}, '
            '{"arange": true}'
        )
    ((how, value),) = raw.items()
    if how == "randint" and isinstance(value, list) and len(value) == 2:
        return ArgOverride(randint=(int(value[0]), int(value[1])))
    if how == "fill" and isinstance(value, int | float):
        return ArgOverride(fill=float(value))
    if how == "arange" and value is True:
        return ArgOverride(arange=True)
    raise CaptureError(f"{where}: {arg}: {how!r}={value!r} is not randint, fill or arange")


def read_overrides(directory: str | Path, kernel: CapturedKernel) -> KernelOverrides:
    """The kernel's entry of ``<directory>/overrides.json`` (empty when there is none)."""
    path = Path(directory) / OVERRIDES_FILE
    if not path.is_file():
        return KernelOverrides()
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise CaptureError(f"{path} is not valid JSON: {exc}") from None
    entry = data.get(kernel.name) if isinstance(data, Mapping) else None
    if entry is None:
        return KernelOverrides()
    where = f"{path}: {kernel.name}"
    raw_args = entry.get("args", {})
    outputs = entry.get("outputs", [])
    if not isinstance(raw_args, Mapping) or not isinstance(outputs, list):
        raise CaptureError(f"{where}: 'args' must be an object and 'outputs' a list")
    for name in outputs:
        if name not in kernel.arg_names:
            raise CaptureError(f"{where}: output {name!r} is not an argument of the kernel")
    return KernelOverrides(
        {a: _override(kernel, a, r, where) for a, r in raw_args.items()}, tuple(outputs)
    )


def _kind(values: tuple[Any, ...]) -> ParamKind:
    if all(isinstance(v, bool) for v in values):
        return ParamKind.BOOL
    if all(is_pow2(v) for v in values):
        return ParamKind.POW2
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return ParamKind.INT
    return ParamKind.CATEGORICAL


def config_of(raw: Mapping[str, Any], options: tuple[str, ...]) -> Config:
    """A captured ``triton.Config`` as a flat config: its kwargs, then the launch options kept."""
    return {**raw["kwargs"], **{o: raw[o] for o in options}}


def _options(kernel: CapturedKernel) -> tuple[str, ...]:
    """Launch options in the space: num_warps and num_stages, and any other one a config sets."""
    return tuple(
        name
        for name, default in CONFIG_OPTIONS.items()
        if name in ("num_warps", "num_stages")
        or any(c.get(name, default) != default for c in kernel.configs)
    )


def _grid_rows(launch: CapturedLaunch) -> dict[tuple[Any, ...], list[int]] | None:
    grid = launch.grid
    if not isinstance(grid, Mapping):
        return None
    return {tuple(row[:-1]): list(row[-1]) for row in grid["rows"]}


def build_space(kernel: CapturedKernel, widen: bool) -> Space:
    """The kernel's config list (``widen`` False) or the widened product (see the module doc)."""
    names = list(dict.fromkeys(k for c in kernel.configs for k in c["kwargs"]))
    options = _options(kernel)
    configs = [config_of(c, options) for c in kernel.configs]
    params = []
    for name in [*names, *options]:
        observed = [c[name] for c in configs if name in c]
        if len(observed) != len(configs):
            raise CaptureError(f"{kernel.name}: not every config sets {name!r}")
        bad = [v for v in observed if not isinstance(v, bool | int | str)]
        if bad:
            raise CaptureError(f"{kernel.name}: {name}={bad[0]!r} is not an int, bool or str")
        values = widened_values(name, observed) if widen else tuple(dict.fromkeys(observed))
        if _kind(values) is not ParamKind.CATEGORICAL:
            values = tuple(sorted(values))
        params.append(Param(name, values, _kind(values)))
    if not widen:
        allowed = frozenset(config_key(c) for c in configs)
        listed = Constraint(
            "config-list",
            f"one of the kernel's {len(allowed)} configs",
            tuple(p.name for p in params),
            lambda c, _lim: config_key(c) in allowed,
        )
        return Space(tuple(params), (listed,))
    rules = [
        Constraint(
            "threads",
            "num_warps * warp size <= max threads per block",
            ("num_warps",),
            lambda c, lim: int(c["num_warps"]) * lim.warp_size <= lim.max_threads_per_block,
        )
    ]
    blocks = tuple(n for n in names if "BLOCK" in n.upper() and all(is_pow2(c[n]) for c in configs))
    if blocks:
        rules.append(_tile_rule(blocks, configs))
    tables = [t for t in (_grid_rows(launch) for launch in kernel.launches) if t is not None]
    if tables and names:
        known = frozenset.intersection(*(frozenset(t) for t in tables))
        rules.append(
            Constraint(
                "grid-known",
                f"the app's grid function was evaluated for these constexprs ({len(known)} "
                "combinations)",
                tuple(names),
                lambda c, _lim: tuple(c[n] for n in names) in known,
            )
        )
    return Space(tuple(params), tuple(rules))


def _tile_rule(blocks: tuple[str, ...], configs: list[dict[str, Any]]) -> Constraint:
    """Widened tiles bounded by the kernel's own list: for every product of two or more block
    sizes (a matmul's BLOCK_M x BLOCK_N accumulator, its whole M x N x K tile, ...; of the one
    block size if there is one), no config's is larger, nor larger per warp, than the list's
    largest; one block size alone may grow. On the H200 a 64x512x16 matmul tile at one warp (a
    64x512 accumulator on 32 threads) compiled for over 120 s."""
    subsets = [
        group
        for size in range(min(2, len(blocks)), len(blocks) + 1)
        for group in itertools.combinations(blocks, size)
    ]

    def product(c: Mapping[str, Any], group: tuple[str, ...]) -> int:
        return math.prod(int(c[n]) for n in group)

    most = {g: max(product(c, g) for c in configs) for g in subsets}
    per_warp = {g: max(product(c, g) / int(c["num_warps"]) for c in configs) for g in subsets}
    return Constraint(
        "tile-size",
        ("every product of two or more of " if len(blocks) > 1 else "")
        + f"{', '.join(blocks)}, in all and per warp, <= the kernel's own largest "
        f"(of all of them: {most[blocks]}, {per_warp[blocks]:g} per warp)",
        (*blocks, "num_warps"),
        lambda c, _lim: all(
            product(c, g) <= most[g] and product(c, g) / int(c["num_warps"]) <= per_warp[g]
            for g in subsets
        ),
    )


def _schema(kernel: CapturedKernel) -> ProblemSchema:
    fields = []
    problems = [launch.problem for launch in kernel.launches]
    for name in [*kernel.key, "dtypes"]:
        values = [p[name] for p in problems]
        if name != "dtypes" and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            fields.append(Field(name))
        elif all(isinstance(v, bool) for v in values):
            fields.append(Field(name, FieldKind.BOOL))
        else:
            choices = tuple(dict.fromkeys(str(v) for v in values))
            fields.append(Field(name, FieldKind.CHOICE, choices))
    return ProblemSchema(tuple(fields))


class CaptureSpec(KernelSpec):
    """A spec whose every part comes from a :class:`CapturedKernel` (see the module doc)."""

    sources = ()

    def __init__(self, kernel: CapturedKernel, overrides: KernelOverrides, widen: bool) -> None:
        if not kernel.launches:
            raise CaptureError(f"capture of {kernel.name} holds no launch")
        self.kernel = kernel
        self.overrides = overrides
        self.widen = widen
        self._options = _options(kernel)
        self._names = [n for n in dict.fromkeys(k for c in kernel.configs for k in c["kwargs"])]
        self._space = build_space(kernel, widen)
        self._schema = _schema(kernel)
        self._tuner: Any = None
        self._outputs: dict[str, list[str]] = {}
        self._ref_config: Config | None = None

    # The class attributes of KernelSpec, per instance.
    @property
    def name(self) -> str:  # type: ignore[override]
        return self.kernel.name

    @property
    def description(self) -> str:  # type: ignore[override]
        shown = "widened space" if self.widen else "its own config list"
        return f"captured @triton.autotune kernel {self.kernel.module}.{self.kernel.qualname} ({shown})"

    @property
    def schema(self) -> ProblemSchema:  # type: ignore[override]
        return self._schema

    @property
    def example(self) -> Problem:  # type: ignore[override]
        return self.problems()[0]

    @property
    def space(self) -> Space:  # type: ignore[override]
        return self._space

    def problems(self) -> list[Problem]:
        """Every captured key as a problem, in the order the app first launched them."""
        return [self.schema.validate(launch.problem) for launch in self.kernel.launches]

    def version_hash(self) -> str:
        """The captured source's hash and the space's: the launcher refuses another source."""
        return f"{self.kernel.source_hash[:8]}{self.space.hash()[:8]}"

    def default_config(self, vendor: Vendor) -> Config:
        return config_of(self.kernel.configs[0], self._options)

    def listed_configs(self, limits: DeviceLimits) -> list[Config]:
        """Widened: the kernel's own list (those valid here), asked right after its first
        config, so the search tries everything ``triton.autotune`` would before widening (give
        at least the list's length in trials). Not widened: none (the grid search asks them)."""
        if not self.widen:
            return []
        listed = [config_of(c, self._options) for c in self.kernel.configs]
        return [c for c in listed if self.space.violation(c, limits) is None]

    def flops(self, problem: Problem) -> float:
        return 0.0  # unknown for a captured kernel: summaries show no TFLOP/s

    def bytes_moved(self, problem: Problem) -> float:
        """Bytes of every tensor argument (each read or written once: an estimate)."""
        total = 0
        for arg in self._launch(problem).args.values():
            if arg.get("tensor"):
                n = 1
                for d in arg["shape"]:
                    n *= int(d)
                total += n * _itemsize(arg["dtype"])
        return float(total)

    def tolerance(self, problem: Problem) -> float:
        launch = self._launch(problem)
        outputs = self._outputs.get(problem_key(problem)) or list(self.overrides.outputs)
        dtypes = [launch.args[o]["dtype"] for o in outputs[:1]] or [
            a["dtype"] for a in launch.args.values() if a.get("tensor")
        ]
        return max(
            (DEFAULT_TOLERANCE.get(d, 0.0 if d in INT_DTYPES else 1e-3) for d in dtypes),
            default=1e-3,
        )

    def _launch(self, problem: Mapping[str, Any]) -> CapturedLaunch:
        return self.kernel.launch_for(self.schema.validate(problem))

    def check_inputs(self) -> None:
        """Raise CaptureError naming the first argument whose values the capture cannot make."""
        where = f"{OVERRIDES_FILE} of the capture"
        for launch in self.kernel.launches:
            for name, arg in launch.args.items():
                if name in self.overrides.args:
                    continue
                if arg.get("tensor") and arg["dtype"] in INT_DTYPES:
                    raise CaptureError(
                        f"{self.kernel.name}: argument {name!r} is an integer tensor "
                        f"({arg['dtype']}) whose values may index other tensors; give them in the "
                        f'{where}, e.g. {{"{self.kernel.name}": {{"args": {{"{name}": '
                        '{"randint": [0, 1024]}}}}'
                    )
                if "unsupported" in arg:
                    raise CaptureError(
                        f"{self.kernel.name}: argument {name!r} is a {arg['unsupported']}, which "
                        f"a capture cannot record; give a fill for it in the {where}"
                    )

    # Tensor methods: run in the trial process only.

    def _kernel_object(self) -> Any:
        if self._tuner is not None:
            return self._tuner
        kernel = self.kernel
        if kernel.root and kernel.root not in sys.path:
            sys.path.insert(0, kernel.root)
        try:
            if kernel.module == "__main__":
                if not kernel.file:
                    raise CaptureError(f"{kernel.name}: its script's file was not recorded")
                alias = "tunefleet_capture_" + hashlib.sha256(kernel.file.encode()).hexdigest()[:8]
                module = sys.modules.get(alias)
                if module is None:
                    found = importlib.util.spec_from_file_location(alias, kernel.file)
                    if found is None or found.loader is None:
                        raise CaptureError(f"{kernel.name}: cannot load {kernel.file}")
                    module = importlib.util.module_from_spec(found)
                    sys.modules[alias] = module
                    found.loader.exec_module(module)
            else:
                module = importlib.import_module(kernel.module)
        except CaptureError:
            raise
        except Exception as exc:  # the app's module failing to import is the app's to fix
            raise CaptureError(
                f"cannot import {kernel.module!r} for {kernel.name}: {exc}"
            ) from None
        obj: Any = module
        for part in kernel.qualname.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise CaptureError(f"{kernel.module!r} has no {kernel.qualname!r} any more")
        while not hasattr(obj, "configs") or not hasattr(obj, "keys"):
            if not hasattr(obj, "fn"):
                raise CaptureError(f"{kernel.name} is no longer a @triton.autotune kernel")
            obj = obj.fn
        from search_spaces.triton_capture import kernel_source, source_hash

        if source_hash(kernel_source(obj.base_fn)) != kernel.source_hash:
            raise CaptureError(
                f"{kernel.name}: the kernel's source changed since the capture; capture again"
            )
        self._tuner = obj
        return obj

    def _make_tensors(self, launch: CapturedLaunch, device: str) -> dict[str, Any]:
        import torch

        self.check_inputs()
        out: dict[str, Any] = {}
        for name, arg in launch.args.items():
            if not arg.get("tensor"):
                continue
            dtype = getattr(torch, arg["dtype"])
            shape, stride = list(arg["shape"]), list(arg["stride"])
            size = (
                int(arg["offset"])
                + 1
                + sum((d - 1) * s for d, s in zip(shape, stride, strict=True) if d > 0)
            )
            if any(d == 0 for d in shape):
                size = int(arg["offset"])
            how = self.overrides.args.get(name)
            if how is not None and how.randint is not None:
                flat = torch.randint(*how.randint, (size,), device=device).to(dtype)
            elif how is not None and how.fill is not None:
                flat = torch.full((size,), how.fill, device=device).to(dtype)
            elif how is not None and how.arange:
                flat = torch.arange(size, device=device).to(dtype)
            elif dtype is torch.bool:
                flat = torch.randint(0, 2, (size,), device=device).bool()
            else:
                flat = torch.randn(size, device=device).to(dtype)
            out[name] = flat.as_strided(shape, stride, int(arg["offset"]))
        return out

    def _call(self, launch: CapturedLaunch, tensors: Mapping[str, Any]) -> dict[str, Any]:
        import triton.language as tl

        call: dict[str, Any] = {}
        for name, arg in launch.args.items():
            if name in tensors:
                call[name] = tensors[name]
            elif "tl_dtype" in arg:
                call[name] = getattr(tl, str(arg["tl_dtype"]).rsplit(".", 1)[-1])
            elif "value" in arg:
                call[name] = arg["value"]
            else:
                call[name] = self.overrides.args[name].fill
        return call

    def _grid(self, launch: CapturedLaunch, config: Mapping[str, Value]) -> tuple[int, ...]:
        rows = _grid_rows(launch)
        if rows is None:
            if launch.grid is None:
                raise CaptureError(f"{self.kernel.name}: the capture recorded no launch grid")
            return tuple(launch.grid)
        combo = tuple(config[n] for n in self._names)
        if combo not in rows:
            raise CaptureError(
                f"{self.kernel.name}: the app's grid function was not evaluated for {combo}"
            )
        return tuple(rows[combo])

    def _launcher(
        self,
        launch: CapturedLaunch,
        tensors: Mapping[str, Any],
        config: Config,
        pristine: Mapping[str, Any],
    ) -> Launcher:
        """Launches ``config`` once on ``tensors``, first zeroing the ``reset_to_zero`` arguments
        and copying the ``restore_value`` ones back from ``pristine`` (as Triton's autotuner does
        between its timed launches)."""
        target = self._kernel_object().fn
        call = self._call(launch, tensors)
        grid = self._grid(launch, config)
        meta = dict(config)
        zero = [tensors[n] for n in self.kernel.reset_to_zero if n in tensors]
        restore = [(tensors[n], pristine[n]) for n in self.kernel.restore_value if n in pristine]

        def launch_once() -> None:
            for t in zero:
                t.zero_()
            for dst, src in restore:
                dst.copy_(src)
            target[grid](**call, **meta)

        return launch_once

    def _reference_run(self, launch: CapturedLaunch, tensors: Mapping[str, Any]) -> dict[str, Any]:
        """Launch the reference config on copies of ``tensors``; the copies after the launch."""
        copies = {n: t.clone() for n, t in tensors.items()}
        candidates = (
            [self._ref_config]
            if self._ref_config is not None
            else [config_of(c, self._options) for c in self.kernel.configs]
        )
        errors = []
        for config in candidates:
            if config is None:
                continue
            try:
                self._launcher(launch, copies, config, tensors)()
            except CaptureError:
                raise
            except Exception as exc:  # this config does not run here: try the next one
                errors.append(f"{config_key(config)}: {type(exc).__name__}: {exc}")
                copies = {n: t.clone() for n, t in tensors.items()}
                continue
            self._ref_config = config
            return copies
        raise CaptureError(
            f"{self.kernel.name}: no config of the kernel's list runs on the captured inputs "
            f"({errors[0] if errors else 'none'})"
        )

    def build_inputs(self, problem: Problem, device: str) -> Inputs:
        import torch

        launch = self._launch(problem)
        tensors = self._make_tensors(launch, device)
        after = self._reference_run(launch, tensors)
        pkey = problem_key(self.schema.validate(problem))
        outputs = self._outputs.get(pkey)
        if outputs is None:
            outputs = list(self.overrides.outputs) or [
                n for n, t in tensors.items() if not torch.equal(t, after[n])
            ]
            if not outputs:
                raise CaptureError(
                    f"{self.kernel.name}: a launch wrote none of its tensor arguments; name the "
                    f'output in {OVERRIDES_FILE}: {{"{self.kernel.name}": {{"outputs": ["..."]}}}}'
                )
            self._outputs[pkey] = outputs
        return {
            **tensors,
            "out": tensors[outputs[0]],
            _REFERENCE: after[outputs[0]],
            _LAUNCH: pkey,
            **{
                _PRISTINE + n: tensors[n].clone() for n in self.kernel.restore_value if n in tensors
            },
        }

    def make_launcher(self, inputs: Inputs, config: Config) -> Launcher:
        launch = self._launch(json.loads(inputs[_LAUNCH]))
        tensors = {n: inputs[n] for n, a in launch.args.items() if a.get("tensor")}
        pristine = {n: inputs[_PRISTINE + n] for n in self.kernel.restore_value if n in tensors}
        return self._launcher(launch, tensors, config, pristine)

    def reference(self, inputs: Inputs) -> Any:
        """The first output of the reference config (see the module doc), computed with the inputs."""
        return inputs[_REFERENCE]

    def validate_problem(self, raw: Mapping[str, object]) -> Problem:
        problem = self.schema.validate(raw)
        self.kernel.launch_for(problem)
        return problem


def _itemsize(dtype: str) -> int:
    digits = "".join(ch for ch in dtype if ch.isdigit())
    return max(1, int(digits) // 8) if digits else 1


def _find(directory: str | Path, kernel: str) -> CapturedKernel:
    found = {k.name: k for k in read_capture(directory)}
    if kernel not in found:
        raise CaptureError(
            f"capture {directory} has no kernel {kernel!r}; it has {', '.join(sorted(found))}"
        )
    return found[kernel]


def capture_spec(directory: str | Path, kernel: str, widen: bool) -> CaptureSpec:
    """The spec of ``kernel`` in the capture ``directory``; raises CaptureError."""
    chosen = _find(directory, kernel)
    return CaptureSpec(chosen, read_overrides(directory, chosen), widen)


def captured_spec(ref: str) -> CaptureSpec:
    """The spec a ``captured:`` reference names, from this machine's capture index: the kernel
    record of the newest indexed capture holding that name and source hash, with every key
    captured of it (the newest capture's first, then those only older captures of the same
    config list and key hold), and the newest ``overrides.json`` entry for it. Raises
    CaptureError (one line) for a malformed reference or when no capture here holds it."""
    parsed = parse_ref(ref)
    found = captures_of(parsed, indexed_directories(parsed))
    if not found:
        raise CaptureError(
            f"no capture on this machine holds {parsed.name} with source {parsed.source_hash}; "
            "capture it here (`tunefleet capture --out DIR -- python app.py`) or index a copy "
            "(`tunefleet capture --refs DIR`)"
        )
    (_, newest), *older = found
    kernel = replace(newest, launches=list(newest.launches))
    seen = [launch.problem for launch in kernel.launches]
    shape = (newest.configs, newest.key, newest.arg_names)
    for _, other in older:
        if (other.configs, other.key, other.arg_names) != shape:
            continue  # another config list: another space, its keys are not this spec's
        for launch in other.launches:
            if launch.problem not in seen:
                kernel.launches.append(launch)
                seen.append(launch.problem)
    overrides = next(
        (o for o in (read_overrides(d, kernel) for d, _ in found) if o != KernelOverrides()),
        KernelOverrides(),
    )
    return CaptureSpec(kernel, overrides, parsed.widen)


def capture_specs(directory: str | Path, widen: bool) -> list[tuple[str, CaptureSpec]]:
    """``(registry reference, spec)`` of every kernel in a capture, inputs checked."""
    out = []
    for kernel in read_capture(directory):
        spec = CaptureSpec(kernel, read_overrides(directory, kernel), widen)
        spec.check_inputs()
        out.append((ref_of(kernel, widen), spec))
    return out
