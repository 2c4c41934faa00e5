"""Known device classes: their limits for search spaces and vendor peak numbers for rooflines.

Every row cites where its numbers come from. Limits are what the runtime reports for one device as
torch sees it (one MI250X GCD is one device), so they match a detected fingerprint of that class.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from search_spaces import DeviceLimits, Vendor
from workers.errors import UnknownDeviceClass

KIB = 1024
GB = 10**9
GIB = 2**30


@dataclass(frozen=True)
class DeviceClass:
    """The key results are stored under: vendor, normalized name, arch; ``replay`` marks replays."""

    vendor: Vendor
    name: str
    arch: str
    replay: bool = False

    @property
    def key(self) -> str:
        """Short stable string for the DB and the CLI: the name, or ``replay:<name>``."""
        return f"replay:{self.name}" if self.replay else self.name


@dataclass(frozen=True)
class KnownClass:
    """One row of the table: a device class with its limits and peak numbers."""

    name: str
    aliases: tuple[str, ...]
    limits: DeviceLimits
    memory_bytes: int
    memory_bandwidth_gbs: float | None
    bf16_tflops: float | None
    ray_accelerator: str | None
    source: str

    @property
    def vendor(self) -> Vendor:
        return self.limits.vendor

    @property
    def arch(self) -> str:
        return self.limits.arch

    @property
    def device_class(self) -> DeviceClass:
        return DeviceClass(self.vendor, self.name, self.arch)

    def to_dict(self) -> dict[str, object]:
        """Flat JSON-ready row (the same keys for every class)."""
        lim = self.limits
        return {
            "name": self.name,
            "vendor": self.vendor.value,
            "arch": self.arch,
            "aliases": list(self.aliases),
            "shared_mem_per_block": lim.shared_mem_per_block,
            "registers_per_block": lim.registers_per_block,
            "warp_size": lim.warp_size,
            "multiprocessors": lim.multiprocessors,
            "max_threads_per_block": lim.max_threads_per_block,
            "memory_bytes": self.memory_bytes,
            "memory_bandwidth_gbs": self.memory_bandwidth_gbs,
            "bf16_tflops": self.bf16_tflops,
            "ray_accelerator": self.ray_accelerator,
            "source": self.source,
        }


def _nvidia(name: str, arch: str, smem_kib: int, sms: int) -> DeviceLimits:
    return DeviceLimits(Vendor.NVIDIA, name, arch, smem_kib * KIB, 65536, 32, sms, 1024)


def _amd(name: str, arch: str, cus: int) -> DeviceLimits:
    # CDNA: 64 KiB LDS per workgroup, wavefront 64, 1024 work-items per workgroup; HIP reports
    # regsPerBlock = 65536 (AMD CDNA ISA guides, HIP hipDeviceProp_t).
    return DeviceLimits(Vendor.AMD, name, arch, 64 * KIB, 65536, 64, cus, 1024)


_CUDA_GUIDE = "CUDA C++ Programming Guide, compute-capability table (227 KB/163 KB smem per block)"

KNOWN_CLASSES: tuple[KnownClass, ...] = (
    KnownClass(
        "NVIDIA A100-SXM4-80GB",
        ("A100", "A100-80G", "A100 80GB", "A100-SXM4-80GB"),
        _nvidia("NVIDIA A100-SXM4-80GB", "sm_80", 163, 108),
        80 * GB,
        2039.0,
        312.0,
        "A100",
        f"NVIDIA A100 datasheet (SXM 80GB: 2,039 GB/s, BF16 312 TF dense); {_CUDA_GUIDE}",
    ),
    KnownClass(
        "NVIDIA H100 80GB HBM3",
        ("H100", "H100 SXM", "H100-SXM5-80GB"),
        _nvidia("NVIDIA H100 80GB HBM3", "sm_90", 227, 132),
        80 * GB,
        3350.0,
        989.0,
        "H100",
        f"NVIDIA H100 datasheet (SXM5: 3.35 TB/s, BF16 1,979 TF sparse = 989 dense); {_CUDA_GUIDE}",
    ),
    KnownClass(
        "NVIDIA H200",
        ("H200", "H200 SXM"),
        _nvidia("NVIDIA H200", "sm_90", 227, 132),
        141 * GB,
        4800.0,
        989.0,
        "H200",
        f"NVIDIA H200 datasheet (SXM: 141 GB, 4.8 TB/s, BF16 989 TF dense); {_CUDA_GUIDE}",
    ),
    KnownClass(
        "NVIDIA B200",
        ("B200",),
        _nvidia("NVIDIA B200", "sm_100", 227, 148),
        180 * GB,
        8000.0,
        2250.0,
        "B200",
        f"NVIDIA HGX B200 datasheet (per GPU: 180 GB, 8 TB/s, BF16 4.5 PF sparse = 2.25 dense); {_CUDA_GUIDE}",
    ),
    KnownClass(
        "AMD Instinct MI250X",
        ("MI250X", "AMD Instinct MI250X/MI250", "AMD-Instinct-MI250X"),
        _amd("AMD Instinct MI250X", "gfx90a", 110),
        64 * GIB,
        1638.4,
        191.5,
        "AMD-Instinct-MI250X",
        "AMD Instinct MI250X datasheet, per GCD (half an OAM): 110 CUs, 64 GB, 1.6384 TB/s, BF16 191.5 TF",
    ),
    KnownClass(
        "AMD Instinct MI300X",
        ("MI300X", "AMD-Instinct-MI300X-OAM", "MI300X OAM"),
        _amd("AMD Instinct MI300X", "gfx942", 304),
        192 * GIB,
        5300.0,
        1307.4,
        "AMD-Instinct-MI300X-OAM",
        "AMD Instinct MI300X datasheet / CDNA3 white paper: 304 CUs, 192 GB, 5.3 TB/s, BF16 1,307.4 TF",
    ),
    KnownClass(
        "AMD Instinct MI325X",
        ("MI325X", "AMD-Instinct-MI325X-OAM"),
        _amd("AMD Instinct MI325X", "gfx942", 304),
        256 * GIB,
        6000.0,
        1307.4,
        "AMD-Instinct-MI325X-OAM",
        "AMD Instinct MI325X datasheet: 304 CUs, 256 GB HBM3E, 6 TB/s, BF16 1,307.4 TF dense",
    ),
    # Triton's interpreter has no hardware limits. It takes H100/H200's (sm_90) on purpose, so a
    # space enumerates on `cpu` the same configs it would on sm_90 and CI checks those configs.
    KnownClass(
        "cpu",
        ("interpreter", "CPU"),
        DeviceLimits(Vendor.CPU, "cpu", "interpreter", 227 * KIB, 65536, 32, 132, 1024),
        0,
        None,
        None,
        None,
        "Triton interpreter on CPU: limits copied from sm_90 (see the comment above)",
    ),
)


def _fold(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("_", " ")).strip().casefold()


def _index() -> dict[str, KnownClass]:
    out: dict[str, KnownClass] = {}
    for row in KNOWN_CLASSES:
        for alias in (row.name, *row.aliases):
            out[_fold(alias)] = row
    return out


def known_names() -> tuple[str, ...]:
    """The canonical names of every known class, in table order."""
    return tuple(row.name for row in KNOWN_CLASSES)


def find(name_or_alias: str) -> KnownClass | None:
    """The known class a name or alias (case and spacing ignored) names, or None."""
    return _index().get(_fold(name_or_alias))


def lookup(name_or_alias: str) -> KnownClass:
    """The known class for a name or alias such as ``H200`` or ``AMD Instinct MI300X``.

    Raises UnknownDeviceClass listing the known names when nothing matches.
    """
    row = find(name_or_alias)
    if row is None:
        raise UnknownDeviceClass(
            f"unknown device class {name_or_alias!r}; known: {', '.join(known_names())} "
            "(short aliases such as H200 or MI300X work too)"
        )
    return row


def rows_for_arch(arch: str) -> tuple[KnownClass, ...]:
    """Known classes of one arch (e.g. ``gfx942``), in table order."""
    return tuple(row for row in KNOWN_CLASSES if row.arch == arch)


def parse_class(text: str) -> DeviceClass:
    """A DeviceClass from a CLI/DB key: a known name or alias, optionally prefixed ``replay:``."""
    replay = text.strip().startswith("replay:")
    row = lookup(text.strip().removeprefix("replay:"))
    cls = row.device_class
    return DeviceClass(cls.vendor, cls.name, cls.arch, replay=replay)


def canonical_class_key(text: str) -> str:
    """The canonical key of a class name or alias (``replay:`` kept), or ``text`` stripped if unknown.

    ``h200`` -> ``NVIDIA H200``, ``replay:MI300X`` -> ``replay:AMD Instinct MI300X``.
    """
    try:
        return parse_class(text).key
    except UnknownDeviceClass:
        return text.strip()
