"""Kernels, device classes and environments: the catalog trials, studies and best rows point at."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.errors import NotFound
from db.models import DeviceClass, Environment, Kernel
from db.repository._rows import get_or_create, record


@dataclass(frozen=True)
class DeviceClassRecord:
    """A device class row; ``limits`` is the class's DeviceLimits as a dict (vendor as its value)."""

    id: int
    key: str
    vendor: str
    name: str
    arch: str
    replay: bool
    limits: dict[str, Any] | None


@dataclass(frozen=True)
class EnvironmentRecord:
    """An environment row: the software versions a measurement ran under."""

    id: int
    device_class_id: int
    driver: str
    runtime: str
    triton_version: str
    torch_version: str


def ensure_device_class(
    s: Session,
    key: str,
    vendor: str,
    name: str,
    arch: str,
    replay: bool = False,
    limits: Mapping[str, Any] | None = None,
) -> int:
    """Id of the device class ``key``, created with the other fields if new (an existing row is kept)."""
    return get_or_create(
        s,
        DeviceClass,
        {"key": key},
        vendor=vendor,
        name=name,
        arch=arch,
        replay=replay,
        limits=dict(limits) if limits is not None else None,
    )


def ensure_environment(
    s: Session,
    device_class_id: int,
    driver: str,
    runtime: str,
    triton_version: str,
    torch_version: str,
) -> int:
    """Id of the environment with exactly these fields (use ``""`` for a field that does not apply)."""
    key = {
        "device_class_id": device_class_id,
        "driver": driver,
        "runtime": runtime,
        "triton_version": triton_version,
        "torch_version": torch_version,
    }
    return get_or_create(s, Environment, key)


def device_class_by_key(s: Session, key: str) -> DeviceClassRecord | None:
    """The device class ``key`` (exact match), or None if there is none."""
    row = s.scalar(sa.select(DeviceClass).where(DeviceClass.key == key))
    return record(DeviceClassRecord, row) if row is not None else None


def get_environment(s: Session, environment_id: int) -> EnvironmentRecord:
    """The environment ``environment_id``; raises NotFound if there is none."""
    env = s.get(Environment, environment_id)
    if env is None:
        raise NotFound(f"no environment {environment_id}")
    return record(EnvironmentRecord, env)


def ensure_kernel(s: Session, name: str, version_hash: str, space_hash: str) -> int:
    """Id of kernel ``name`` at ``version_hash``, created with ``space_hash`` if new."""
    key = {"name": name, "version_hash": version_hash}
    return get_or_create(s, Kernel, key, space_hash=space_hash)


def kernel_ids(s: Session, name: str, version_hash: str) -> list[int]:
    """Ids of kernel ``name`` at ``version_hash`` ([] if it was never stored)."""
    query = sa.select(Kernel.id).where(Kernel.name == name, Kernel.version_hash == version_hash)
    return list(s.scalars(query))


def device_classes_by_key(s: Session, keys: Collection[str]) -> dict[str, DeviceClassRecord]:
    """The device classes of ``keys`` (exact matches) by key; a key with none is absent."""
    if not keys:
        return {}
    rows = s.scalars(sa.select(DeviceClass).where(DeviceClass.key.in_(list(keys))))
    return {row.key: record(DeviceClassRecord, row) for row in rows}
