"""Known device classes: their limits for search spaces and vendor peak numbers for rooflines.

Every row cites where its numbers come from. Limits are what the runtime reports for one device as
torch sees it (one MI250X GCD is one device), so they match a detected fingerprint of that class.
Names, aliases, arch, memory and multiprocessors (what identifies a class) live in
:mod:`search_spaces.device_identity`; this table adds what a class can do.
"""

from __future__ import annotations

from dataclasses import dataclass

from search_spaces import DeviceLimits, MathRate, Vendor
from search_spaces.device_identity import (
    DeviceClass,
    DeviceIdentityError,
    KnownName,
    canonical_key,
    known_name,
)
from workers.errors import UnknownDeviceClass

KIB = 1024


@dataclass(frozen=True)
class KnownClass:
    """One row of the table: a known class (its identity) with its limits and peak numbers."""

    identity: KnownName
    limits: DeviceLimits
    memory_bandwidth_gbs: float | None
    bf16_tflops: float | None
    #: Dense FP8 (e4m3) tensor-core peak; None where the class has no FP8 tensor cores.
    fp8_tflops: float | None
    ray_accelerator: str | None
    source: str

    @property
    def name(self) -> str:
        return self.identity.name

    @property
    def aliases(self) -> tuple[str, ...]:
        return self.identity.aliases

    @property
    def memory_bytes(self) -> int:
        return self.identity.memory_bytes

    @property
    def vendor(self) -> Vendor:
        return self.identity.vendor

    @property
    def arch(self) -> str:
        return self.identity.arch

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
            "fp8_tflops": self.fp8_tflops,
            "ray_accelerator": self.ray_accelerator,
            "source": self.source,
        }


def _identity(name: str) -> KnownName:
    found = known_name(name)
    if found is None or found.name != name:
        raise AssertionError(f"device table row {name!r} is not in device_identity.KNOWN_NAMES")
    return found


def _nvidia(name: str, smem_kib: int) -> tuple[KnownName, DeviceLimits]:
    ident = _identity(name)
    limits = DeviceLimits(
        Vendor.NVIDIA, name, ident.arch, smem_kib * KIB, 65536, 32, ident.multiprocessors, 1024
    )
    return ident, limits


def _amd(name: str) -> tuple[KnownName, DeviceLimits]:
    # CDNA: 64 KiB LDS per workgroup, wavefront 64, 1024 work-items per workgroup; HIP reports
    # regsPerBlock = 65536 (AMD CDNA ISA guides, HIP hipDeviceProp_t).
    ident = _identity(name)
    limits = DeviceLimits(
        Vendor.AMD, name, ident.arch, 64 * KIB, 65536, 64, ident.multiprocessors, 1024
    )
    return ident, limits


_CUDA_GUIDE = "CUDA C++ Programming Guide, compute-capability table (227 KB/163 KB smem per block)"

KNOWN_CLASSES: tuple[KnownClass, ...] = (
    KnownClass(
        *_nvidia("NVIDIA A100-SXM4-80GB", 163),
        2039.0,
        312.0,
        None,
        "A100",
        f"NVIDIA A100 datasheet (SXM 80GB: 2,039 GB/s, BF16 312 TF dense, no FP8); {_CUDA_GUIDE}",
    ),
    KnownClass(
        *_nvidia("NVIDIA H100 80GB HBM3", 227),
        3350.0,
        989.0,
        1979.0,
        "H100",
        "NVIDIA H100 datasheet (SXM5: 3.35 TB/s, BF16 1,979 TF sparse = 989 dense, FP8 3,958 TF "
        f"sparse = 1,979 dense); {_CUDA_GUIDE}",
    ),
    KnownClass(
        *_nvidia("NVIDIA H200", 227),
        4800.0,
        989.0,
        1979.0,
        "H200",
        "NVIDIA H200 datasheet (SXM: 141 GB, 4.8 TB/s, BF16 989 TF dense, FP8 3,958 TF sparse = "
        f"1,979 dense); {_CUDA_GUIDE}",
    ),
    KnownClass(
        *_nvidia("NVIDIA B200", 227),
        8000.0,
        2250.0,
        4500.0,
        "B200",
        "NVIDIA HGX B200 datasheet (per GPU: 180 GB, 8 TB/s, BF16 4.5 PF sparse = 2.25 dense, FP8 "
        f"9 PF sparse = 4.5 dense); {_CUDA_GUIDE}",
    ),
    KnownClass(
        *_amd("AMD Instinct MI250X"),
        1638.4,
        191.5,
        None,
        "AMD-Instinct-MI250X",
        "AMD Instinct MI250X datasheet, per GCD (half an OAM): 110 CUs, 64 GB, 1.6384 TB/s, BF16 "
        "191.5 TF, no FP8 (CDNA2)",
    ),
    KnownClass(
        *_amd("AMD Instinct MI300X"),
        5300.0,
        1307.4,
        2614.9,
        "AMD-Instinct-MI300X-OAM",
        "AMD Instinct MI300X datasheet / CDNA3 white paper: 304 CUs, 192 GB, 5.3 TB/s, BF16 1,307.4 "
        "TF, FP8 2,614.9 TF dense",
    ),
    KnownClass(
        *_amd("AMD Instinct MI325X"),
        6000.0,
        1307.4,
        2614.9,
        "AMD-Instinct-MI325X-OAM",
        "AMD Instinct MI325X datasheet: 304 CUs, 256 GB HBM3E, 6 TB/s, BF16 1,307.4 TF dense, FP8 "
        "2,614.9 TF dense",
    ),
    # Triton's interpreter has no hardware limits. It takes H100/H200's (sm_90) on purpose, so a
    # space enumerates on `cpu` the same configs it would on sm_90 and CI checks those configs.
    KnownClass(
        _identity("cpu"),
        DeviceLimits(Vendor.CPU, "cpu", "interpreter", 227 * KIB, 65536, 32, 132, 1024),
        None,
        None,
        None,
        None,
        "Triton interpreter on CPU: limits copied from sm_90 (see the comment above)",
    ),
)


def known_names() -> tuple[str, ...]:
    """The canonical names of every known class, in table order."""
    return tuple(row.name for row in KNOWN_CLASSES)


def find(name_or_alias: str) -> KnownClass | None:
    """The known class a name or alias (case and spacing ignored) names, or None."""
    ident = known_name(name_or_alias)
    if ident is None:
        return None
    return next(row for row in KNOWN_CLASSES if row.identity is ident)


def peak_tflops(known: KnownClass, rate: MathRate) -> float | None:
    """``known``'s dense tensor-core peak at ``rate`` in TFLOP/s, or None where it has none."""
    return known.fp8_tflops if rate is MathRate.FP8 else known.bf16_tflops


def roofline_floor_s(
    flops: float, nbytes: float, known: KnownClass | None, rate: MathRate = MathRate.BF16
) -> float | None:
    """The fewest seconds a launch doing ``flops`` FLOPs at ``rate`` (the kernel spec's
    ``math_rate``) and moving ``nbytes`` bytes can take at ``known``'s vendor peaks:
    ``max(flops / peak at rate, nbytes / bandwidth)`` (bytes alone where it does no math). None
    without a class, without bytes, without a bandwidth (``cpu``) or, where it does math, without
    a peak at ``rate`` (FP8 on a class without FP8 tensor cores, such as the A100)."""
    if known is None or not known.memory_bandwidth_gbs or not nbytes:
        return None
    memory_s = nbytes / (known.memory_bandwidth_gbs * 1e9)
    if not flops:
        return memory_s
    peak = peak_tflops(known, rate)
    return None if not peak else max(flops / (peak * 1e12), memory_s)


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


def parse_class(text: str) -> DeviceClass:
    """The known DeviceClass a CLI/DB key names (a name or alias, optionally ``replay:``);
    UnknownDeviceClass for a class the table does not know or text that is no key."""
    try:
        cls = DeviceClass.parse(text)
    except DeviceIdentityError as exc:
        raise UnknownDeviceClass(str(exc)) from None
    lookup(cls.name)
    return cls


def canonical_class_key(text: str) -> str:
    """:func:`search_spaces.device_identity.canonical_key`, or ``text`` stripped when it is no key
    (for callers that pass what a user typed straight on)."""
    try:
        return canonical_key(text)
    except DeviceIdentityError:
        return text.strip()
