"""Device identity: which device class a device is, what it is called, when two are the same.

The one place that answers these questions for every side: workers name a detected device
(:func:`gpu_class`, :func:`classify`), the orchestrator stores and looks up rows under
:attr:`DeviceClass.key`, exports name their files after it, and a deployment (the Triton drop-in,
bundle lookup) finds the bundles of its device with :func:`same_class`. It imports the standard
library only, so a deployment with neither torch nor SQLAlchemy can import it (or copy the file).

A device class is a vendor (``nvidia``, ``amd``, ``cpu``), a normalized name (``NVIDIA H200``,
``AMD Instinct MI300X``) and an arch (``sm_90``, ``gfx942``); Triton's interpreter is the class
``cpu`` (arch ``interpreter``), and a replayed recording is marked ``replay``. Its *key* is the name,
or ``replay:<name>``. Names are normalized here and nowhere else: spaces collapsed, a known alias
(``H200``, ``MI300X``, case, ``_`` and spacing ignored) gives its table name, and a device that
reports a generic AMD name (``AMD Radeon Graphics``, empty) is named by its arch. Two keys name the
same class when their canonical keys are equal ignoring case (:func:`same_class`).
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CPU_ARCH",
    "CPU_NAME",
    "KNOWN_NAMES",
    "REPLAY_PREFIX",
    "DeviceClass",
    "DeviceIdentityError",
    "KnownName",
    "Vendor",
    "canonical_key",
    "classify",
    "gpu_class",
    "interpreter_class",
    "known_name",
    "names_for_arch",
    "normalize_arch",
    "normalize_name",
    "same_class",
]

REPLAY_PREFIX = "replay:"
CPU_NAME = "cpu"
CPU_ARCH = "interpreter"
#: Longest key a class may have (the database's column width).
MAX_KEY = 200

GB = 10**9
GIB = 2**30

#: Names ROCm reports when it does not know the product; the arch then decides the class.
_GENERIC_AMD = re.compile(r"^(amd )?(radeon( graphics)?|instinct|device [0-9a-f]{4})?$", re.I)
#: The name a GPU of an arch the table does not know gets: ``AMD gfx1100``.
_AMD_ARCH_NAME = re.compile(r"^AMD (gfx[0-9a-z]+)$", re.I)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class DeviceIdentityError(ValueError):
    """A device class key or name is not one (empty, not text, control characters, too long)."""


class Vendor(str, enum.Enum):
    """GPU vendor of a device class; ``cpu`` is Triton's interpreter."""

    NVIDIA = "nvidia"
    AMD = "amd"
    CPU = "cpu"


@dataclass(frozen=True)
class KnownName:
    """A class the table knows: its name, vendor, arch, the aliases that name it, and the two
    detected values that tell apart models reporting one name or one arch (memory, and the
    multiprocessors, SMs or CUs, one device reports)."""

    name: str
    vendor: Vendor
    arch: str
    aliases: tuple[str, ...]
    memory_bytes: int
    multiprocessors: int


#: Every known class, in table order (the device table adds limits and peaks to each).
KNOWN_NAMES: tuple[KnownName, ...] = (
    KnownName(
        "NVIDIA A100-SXM4-80GB",
        Vendor.NVIDIA,
        "sm_80",
        ("A100", "A100-80G", "A100 80GB", "A100-SXM4-80GB"),
        80 * GB,
        108,
    ),
    KnownName(
        "NVIDIA H100 80GB HBM3",
        Vendor.NVIDIA,
        "sm_90",
        ("H100", "H100 SXM", "H100-SXM5-80GB"),
        80 * GB,
        132,
    ),
    KnownName("NVIDIA H200", Vendor.NVIDIA, "sm_90", ("H200", "H200 SXM"), 141 * GB, 132),
    KnownName("NVIDIA B200", Vendor.NVIDIA, "sm_100", ("B200",), 180 * GB, 148),
    KnownName(
        "AMD Instinct MI250X",
        Vendor.AMD,
        "gfx90a",
        ("MI250X", "AMD Instinct MI250X/MI250", "AMD-Instinct-MI250X"),
        64 * GIB,
        110,
    ),
    KnownName(
        "AMD Instinct MI300X",
        Vendor.AMD,
        "gfx942",
        ("MI300X", "AMD-Instinct-MI300X-OAM", "MI300X OAM"),
        192 * GIB,
        304,
    ),
    KnownName(
        "AMD Instinct MI325X",
        Vendor.AMD,
        "gfx942",
        ("MI325X", "AMD-Instinct-MI325X-OAM"),
        256 * GIB,
        304,
    ),
    # Triton's interpreter: no device memory; the multiprocessors are sm_90's (see device_table).
    KnownName(CPU_NAME, Vendor.CPU, CPU_ARCH, ("interpreter", "CPU"), 0, 132),
)


def _collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _fold(text: str) -> str:
    return _collapse(text.replace("_", " ")).casefold()


@functools.cache
def _by_alias() -> dict[str, KnownName]:
    return {_fold(alias): row for row in KNOWN_NAMES for alias in (row.name, *row.aliases)}


def known_name(name_or_alias: str) -> KnownName | None:
    """The known class a name or alias names (case, ``_`` and spacing ignored), or None."""
    return _by_alias().get(_fold(name_or_alias))


def names_for_arch(arch: str) -> tuple[KnownName, ...]:
    """The known classes of one arch (e.g. ``gfx942``), in table order."""
    return tuple(row for row in KNOWN_NAMES if row.arch == arch)


def normalize_arch(arch: str) -> str:
    """``gfx942:sramecc+:xnack-`` -> ``gfx942``: ROCm's target-feature suffixes dropped."""
    return arch.strip().split(":", 1)[0]


def normalize_name(
    raw: str,
    arch: str | None = None,
    *,
    memory_bytes: int | None = None,
    multiprocessors: int | None = None,
) -> str:
    """The class name for a device name as the driver reports it.

    Spaces are trimmed and collapsed; other names are kept as reported (an A100-40GB stays apart
    from an A100-80GB). A name a known class lists as an alias maps to that class, unless the
    detected ``multiprocessors`` differ from the class's (``AMD Instinct MI250X/MI250`` is reported
    by both models). An empty or generic AMD name takes the known class of its ``arch`` (the one
    nearest in ``memory_bytes`` when the arch has several), else ``AMD <arch>``.
    """
    name = _collapse(raw)
    base_arch = normalize_arch(arch) if arch else None
    if base_arch and base_arch.startswith("gfx") and _GENERIC_AMD.match(name):
        rows = names_for_arch(base_arch)
        if not rows:
            return f"AMD {base_arch}"
        if memory_bytes is None:
            return rows[0].name
        return min(rows, key=lambda r: abs(r.memory_bytes - memory_bytes)).name
    row = known_name(name) if name else None
    if row is None or row.name == name:
        return name
    if multiprocessors is not None and multiprocessors != row.multiprocessors:
        return name
    return row.name


def _checked(text: object, what: str) -> str:
    """``text`` stripped; DeviceIdentityError unless it is a non-empty one-line string that fits
    a key."""
    if not isinstance(text, str):
        raise DeviceIdentityError(f"{what} must be text, got {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        raise DeviceIdentityError(f"{what} is empty; name a class such as 'NVIDIA H200' or 'cpu'")
    if _CONTROL.search(stripped):
        raise DeviceIdentityError(f"{what} {stripped[:80]!r} holds a control character")
    if len(stripped) > MAX_KEY:
        raise DeviceIdentityError(
            f"{what} {stripped[:40]!r}... is longer than {MAX_KEY} characters"
        )
    return stripped


@dataclass(frozen=True)
class DeviceClass:
    """The class results are stored under: vendor, normalized name, arch; ``replay`` marks a
    class whose results were replayed from a recording (never a real measurement)."""

    vendor: Vendor
    name: str
    arch: str
    replay: bool = False

    @property
    def key(self) -> str:
        """Short stable string for the database, files and the CLI: the name, or
        ``replay:<name>``; :meth:`parse` reads it back."""
        return f"{REPLAY_PREFIX}{self.name}" if self.replay else self.name

    @property
    def interpreter(self) -> bool:
        """Whether this is Triton's CPU interpreter (class ``cpu``), not a GPU."""
        return self.vendor is Vendor.CPU

    @classmethod
    def parse(cls, key: str) -> DeviceClass:
        """The class a key (or a user's name or alias for one) names.

        ``replay:`` marks a replay; a known name or alias (``h200``) gives the table's name,
        vendor and arch; ``AMD <gfx arch>`` gives that AMD arch; any other name is kept (spaces
        collapsed) with the vendor its first word says (``AMD``: amd, else nvidia) and arch ``""``
        (a key carries no arch). Raises DeviceIdentityError for what cannot be a key."""
        return _parse(_checked(key, "device class"))


@functools.lru_cache(maxsize=1024)
def _parse(text: str) -> DeviceClass:
    replay = text.startswith(REPLAY_PREFIX)
    name = _collapse(text.removeprefix(REPLAY_PREFIX))
    if not name:
        raise DeviceIdentityError(f"device class {text!r} names no device after {REPLAY_PREFIX!r}")
    row = known_name(name)
    if row is not None:
        return DeviceClass(row.vendor, row.name, row.arch, replay)
    amd_arch = _AMD_ARCH_NAME.match(name)
    if amd_arch:
        return DeviceClass(Vendor.AMD, name, amd_arch.group(1).lower(), replay)
    vendor = Vendor.AMD if name.split(" ", 1)[0].casefold() == "amd" else Vendor.NVIDIA
    return DeviceClass(vendor, name, "", replay)


def canonical_key(text: str) -> str:
    """The key ``text`` names: ``h200`` -> ``NVIDIA H200``, ``replay:MI300X`` -> ``replay:AMD
    Instinct MI300X``, an unknown name kept (spaces collapsed). DeviceIdentityError for what
    cannot be a key."""
    return DeviceClass.parse(text).key


def same_class(a: DeviceClass | str, b: DeviceClass | str) -> bool:
    """Whether ``a`` and ``b`` (classes, keys, or names or aliases of them) are one device class:
    their canonical keys are equal ignoring case; a replay is never the same as a measured class.
    DeviceIdentityError for a string that cannot be a key."""
    return _folded(a) == _folded(b)


def _folded(side: DeviceClass | str) -> str:
    key = side.key if isinstance(side, DeviceClass) else canonical_key(side)
    return key.casefold()


def interpreter_class(replay: bool = False) -> DeviceClass:
    """The class Triton's interpreter measures under: ``cpu`` (arch ``interpreter``)."""
    return DeviceClass(Vendor.CPU, CPU_NAME, CPU_ARCH, replay)


def classify(
    vendor: Vendor,
    raw_name: str,
    arch: str,
    *,
    memory_bytes: int | None = None,
    multiprocessors: int | None = None,
    replay: bool = False,
) -> DeviceClass:
    """The class of a device as its runtime reports it (see :func:`normalize_name`); any CPU
    device is the interpreter's class."""
    if vendor is Vendor.CPU:
        return interpreter_class(replay)
    name = normalize_name(
        raw_name, arch, memory_bytes=memory_bytes, multiprocessors=multiprocessors
    )
    return DeviceClass(vendor, name, normalize_arch(arch), replay)


def gpu_class(props: Any, *, hip: bool) -> DeviceClass:
    """The class of a GPU from its properties as torch gives them
    (``torch.cuda.get_device_properties``: ``name``, ``total_memory``, ``multi_processor_count``,
    ``major``/``minor`` on CUDA, ``gcnArchName`` on ROCm); ``hip`` for a ROCm build. The same
    answer for the worker that measures on it and the deployment that looks its bundles up."""
    if hip:
        arch = normalize_arch(str(getattr(props, "gcnArchName", "") or ""))
    else:
        arch = f"sm_{props.major}{props.minor}"
    return classify(
        Vendor.AMD if hip else Vendor.NVIDIA,
        str(props.name),
        arch,
        memory_bytes=int(props.total_memory),
        multiprocessors=int(props.multi_processor_count),
    )
