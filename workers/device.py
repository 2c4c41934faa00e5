"""Device detection: a fingerprint per visible device, its device class and limits.

``detect`` imports torch inside the call; importing this module loads no GPU library.
"""

from __future__ import annotations

import enum
import os
from dataclasses import asdict, dataclass, fields
from importlib import metadata
from typing import Any

from search_spaces import DeviceLimits, Vendor
from search_spaces.device_identity import (
    DeviceClass,
    gpu_class,
    interpreter_class,
    normalize_arch,
    normalize_name,
)
from workers.device_table import find
from workers.errors import DeviceError

__all__ = ["Backend", "DeviceClass", "Fingerprint", "detect", "normalize_arch", "normalize_name"]


class Backend(str, enum.Enum):
    """How trials run: on a CUDA or ROCm GPU, in Triton's CPU interpreter, or replayed."""

    CUDA = "cuda"
    ROCM = "rocm"
    INTERPRETER = "interpreter"
    REPLAY = "replay"

    @classmethod
    def parse(cls, value: Backend | str) -> Backend:
        """A Backend from its value; raises DeviceError naming the choices."""
        if isinstance(value, Backend):
            return value
        try:
            return cls(value.strip().lower())
        except ValueError:
            choices = ", ".join(b.value for b in cls)
            raise DeviceError(f"unknown backend {value!r}; choose one of {choices}") from None


@dataclass(frozen=True)
class Fingerprint:
    """One device as detected: identity, capacity and the software stack that measured on it."""

    vendor: Vendor
    name: str
    arch: str
    memory_bytes: int
    multiprocessors: int
    shared_mem_per_block: int
    driver: str | None
    runtime: str | None
    triton: str | None
    torch: str | None
    backend: Backend
    index: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; ``from_dict`` reads it back."""
        out = asdict(self)
        out["vendor"] = self.vendor.value
        out["backend"] = self.backend.value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fingerprint:
        """Read ``to_dict`` output; raises DeviceError naming a missing field."""
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in data]
        if missing:
            raise DeviceError(
                f"fingerprint lacks {', '.join(missing)}; give every field of to_dict"
            )
        kwargs = {n: data[n] for n in names}
        kwargs["vendor"] = Vendor(data["vendor"])
        kwargs["backend"] = Backend.parse(data["backend"])
        return cls(**kwargs)

    @property
    def device_class(self) -> DeviceClass:
        """The class results are stored under (``cpu`` for the interpreter)."""
        replay = self.backend is Backend.REPLAY
        if self.vendor is Vendor.CPU:
            return interpreter_class(replay)
        return DeviceClass(self.vendor, self.name, self.arch, replay)

    def limits(self) -> DeviceLimits:
        """The table's limits for a known class, else limits from the detected values."""
        cls = self.device_class
        row = find(cls.name)
        if row is not None and row.arch == cls.arch:
            return row.limits
        warp = 64 if self.vendor is Vendor.AMD and not self.arch.startswith("gfx1") else 32
        return DeviceLimits(
            self.vendor,
            cls.name,
            cls.arch,
            self.shared_mem_per_block,
            65536,
            warp,
            self.multiprocessors,
            1024,
        )


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_fingerprint() -> Fingerprint:
    row = find("cpu")
    smem = row.limits.shared_mem_per_block if row else 0
    pages = os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
    page_size = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 0
    return Fingerprint(
        vendor=Vendor.CPU,
        name="cpu",
        arch="interpreter",
        memory_bytes=int(pages * page_size),
        multiprocessors=os.cpu_count() or 1,
        shared_mem_per_block=smem,
        driver=None,
        runtime="interpreter",
        triton=_version("triton"),
        torch=_version("torch"),
        backend=Backend.INTERPRETER,
        index=0,
    )


def _cuda_driver(torch: Any) -> str | None:
    get = getattr(torch._C, "_cuda_getDriverVersion", None)
    if get is None:
        return None
    try:
        version = int(get())
    except (RuntimeError, OSError):
        return None
    return f"cuda-driver {version // 1000}.{(version % 1000) // 10}" if version else None


def _gpu_fingerprints(backend: Backend) -> list[Fingerprint]:
    import torch

    hip = getattr(torch.version, "hip", None)
    if backend is Backend.ROCM and not hip:
        raise DeviceError("this torch is not a ROCm build; use --device cuda or interpreter")
    if backend is Backend.CUDA and hip:
        raise DeviceError("this torch is a ROCm build; use --device rocm")
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        raise DeviceError(
            f"no {backend.value} GPU is visible; use --device interpreter (Triton's CPU interpreter)"
        )
    runtime = f"hip {hip}" if hip else f"cuda {torch.version.cuda}"
    driver = None if hip else _cuda_driver(torch)
    out = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        cls = gpu_class(props, hip=bool(hip))
        smem = getattr(props, "shared_memory_per_block_optin", 0) or getattr(
            props, "shared_memory_per_block", 0
        )
        out.append(
            Fingerprint(
                vendor=cls.vendor,
                name=cls.name,
                arch=cls.arch,
                memory_bytes=int(props.total_memory),
                multiprocessors=int(props.multi_processor_count),
                shared_mem_per_block=int(smem),
                driver=driver,
                runtime=runtime,
                triton=_version("triton"),
                torch=str(torch.__version__),
                backend=backend,
                index=index,
            )
        )
    return out


def detect(backend: Backend | str = "auto") -> list[Fingerprint]:
    """Fingerprints of the visible devices of ``backend``.

    ``auto`` gives the GPUs torch sees (CUDA or ROCm), else one ``cpu`` fingerprint for the
    interpreter. Raises DeviceError when an explicit GPU backend has no device, or for ``replay``
    (replayed devices come from their recording, not from detection).
    """
    if isinstance(backend, str) and backend.strip().lower() == "auto":
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            hip = getattr(torch.version, "hip", None)
            return _gpu_fingerprints(Backend.ROCM if hip else Backend.CUDA)
        return [_cpu_fingerprint()]
    chosen = Backend.parse(backend)
    if chosen is Backend.INTERPRETER:
        return [_cpu_fingerprint()]
    if chosen is Backend.REPLAY:
        raise DeviceError("replay devices are not detected; load them from their recording")
    return _gpu_fingerprints(chosen)
