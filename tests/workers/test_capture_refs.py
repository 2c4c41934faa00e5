"""A ``captured:`` reference resolves, through the capture index, to the kernel with every key
captured of it on this machine; old path references are refused naming the new one; a stored
one is imported only when allowed (hand-written captures: no triton)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from search_spaces.capture_file import CaptureError
from search_spaces.capture_refs import register_capture
from search_spaces.errors import RegistryError
from search_spaces.registry import get_spec, spec_from_storage
from tests.search_spaces.test_capture_refs import NAME, REF, SOURCE, write_capture
from workers.capture_spec import CaptureSpec, capture_spec, captured_spec, ref_for


def test_a_reference_resolves_to_every_key_captured_here(tmp_path: Path) -> None:
    old = write_capture(tmp_path / "old", 100, 300)
    new = write_capture(tmp_path / "untuned", 500, 300)
    for directory in (old, new):
        register_capture(directory)
    spec = get_spec(REF)
    assert isinstance(spec, CaptureSpec) and spec.name == NAME and not spec.widen
    assert [p["n"] for p in spec.problems()] == [500, 300, 100]  # the newest capture's first
    assert spec.version_hash() == capture_spec(old, NAME, False).version_hash()
    assert ref_for(old, NAME, False) == ref_for(new, NAME, False) == REF
    assert captured_spec(f"{REF}+wide").widen


def test_a_capture_of_another_config_list_adds_no_keys(tmp_path: Path) -> None:
    register_capture(write_capture(tmp_path / "a", 100))
    other = write_capture(tmp_path / "b", 700)
    path = other / "capture-1-0.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["configs"] = records[0]["configs"][:1]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    register_capture(other)
    assert [p["n"] for p in captured_spec(REF).problems()] == [700]


def test_a_kernel_no_capture_here_holds_is_refused_in_one_line() -> None:
    with pytest.raises(CaptureError, match=r"no capture on this machine holds app\.other") as e:
        get_spec(f"captured:app.other@{SOURCE}")
    assert "\n" not in str(e.value)


def test_an_old_path_reference_names_the_new_one(tmp_path: Path) -> None:
    directory = write_capture(tmp_path / "a", 100)
    token = base64.urlsafe_b64encode(json.dumps([str(directory), NAME]).encode()).decode()
    with pytest.raises(CaptureError, match=re.escape(f"(it named a path); use {REF}+wide")):
        get_spec(f"workers.capture_spec:wide_{token.rstrip('=')}")
    with pytest.raises(CaptureError, match="use the one `tunefleet capture --refs DIR` prints"):
        get_spec("workers.capture_spec:list_bm90IGpzb24")


def test_a_stored_reference_is_resolved_only_when_allowed(tmp_path: Path) -> None:
    register_capture(write_capture(tmp_path / "a", 100))
    with pytest.raises(RegistryError, match="would run the captured app's code"):
        spec_from_storage(REF)
    assert spec_from_storage(REF, {REF}).name == NAME
    assert spec_from_storage(REF, {"captured"}).name == NAME
