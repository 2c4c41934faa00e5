"""Stack folders (``pull --by-stack``): names from versions, and the folder a reader picks."""

from __future__ import annotations

from pathlib import Path

import pytest

from search_spaces import stack
from search_spaces.stack import StackError, choose_folder, folder_for, parse

TREE = ["triton_3_4_1", "triton_3_6", "triton_3_6_0", "triton_3_8_0", "notes", "triton_3_7_x"]


def test_versions_and_folder_names() -> None:
    assert parse("3.6.0+git1234") == (3, 6, 0) and parse("3.6") == (3, 6, None)
    assert folder_for("3.6", ["3.6.0", "3.6.0rc1"]) == "triton_3_6_0"
    # patch unknown, differing, or of another minor: the minor's folder
    assert folder_for("3.6", [None]) == folder_for("3.6", ["3.6.0", "3.6.1"]) == "triton_3_6"
    assert folder_for("3.6", ["3.7.0", "not a version"]) == "triton_3_6"


@pytest.mark.parametrize("hostile", ["../../etc", "3.6/..", "3.6.0/../x", "3", "", "3.6.0\n"])
def test_a_hostile_version_never_becomes_a_folder(hostile: str) -> None:
    with pytest.raises(StackError) as refused:
        folder_for(hostile, [])
    assert "\n" not in str(refused.value)
    # as an environment's version it only loses the patch; as the installed one it is refused
    assert folder_for("3.6", [hostile]) == "triton_3_6"
    with pytest.raises(StackError):
        choose_folder(TREE, hostile)


def test_reader_picks_matching_then_older_and_refuses_newer_only() -> None:
    assert choose_folder(TREE, "3.6.0") == ("triton_3_6_0", "")
    assert choose_folder(TREE, "3.6.2") == ("triton_3_6", "")  # the minor's own folder
    assert choose_folder(TREE, "3.8.1+git9") == ("triton_3_8_0", "")
    chosen, warning = choose_folder(TREE, "3.7.0")  # triton_3_7_x is not a stack folder
    assert chosen == "triton_3_6_0" and "using the older triton_3_6_0" in warning
    with pytest.raises(StackError, match="newer Triton only"):
        choose_folder(TREE, "3.3.0")


def test_resolve_leaves_a_flat_folder_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stack, "installed_triton", lambda: pytest.fail("triton read"))
    (tmp_path / "b.json").write_text("{}")
    (tmp_path / "triton_cache").mkdir()
    assert stack.resolve(tmp_path) == tmp_path
    assert stack.resolve(tmp_path / "b.json") == tmp_path / "b.json"
