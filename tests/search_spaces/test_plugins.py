"""Entry-point scans: one per group and ``sys.path``, a new path entry seen at once."""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from search_spaces import plugins


def install(folder: Path) -> None:
    """A distribution with one ``tunefleet.kernels`` entry point, as pip leaves it."""
    info = folder / "toy_kernels-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-kernels\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tunefleet.kernels]\ntoy = toy_kernels:SPEC\n")


def test_a_group_is_scanned_once_per_sys_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scans: list[str] = []
    real = plugins.entry_points

    def counting(*, group: str):  # type: ignore[no-untyped-def]
        scans.append(group)
        return real(group=group)

    monkeypatch.setattr(plugins, "entry_points", counting)
    plugins._scan.cache_clear()
    before = plugins.group("tunefleet.kernels")
    assert plugins.group("tunefleet.kernels") == before
    assert scans == ["tunefleet.kernels"]
    install(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert plugins.group("tunefleet.kernels")["toy"].value == "toy_kernels:SPEC"
    assert scans == ["tunefleet.kernels"] * 2
    plugins._scan.cache_clear()


def test_a_caller_cannot_change_what_later_callers_see() -> None:
    seen = plugins.group("tunefleet.kernels")
    seen["x"] = EntryPoint(name="x", value="m:a", group="tunefleet.kernels")
    assert "x" not in plugins.group("tunefleet.kernels")
