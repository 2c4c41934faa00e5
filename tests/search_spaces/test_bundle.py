"""load_bundle checks every entry and says which one is wrong and how (BundleError, one line)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from search_spaces.bundle import BUNDLE_FORMAT, BundleError, load_bundle
from search_spaces.registry import get_spec

CONFIG = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "SPLIT_K": 1}


def _doc() -> dict[str, Any]:
    entries = [
        {
            "problem": {"M": m, "N": 256, "K": 256, "dtype": "float16"},
            "config": dict(CONFIG),
            "time_ms": 0.5,
            "job": 1,
        }
        for m in (64, 128)
    ]
    return {
        "format": BUNDLE_FORMAT,
        "kernel": "matmul",
        "kernel_version": "v",
        "device_class": "NVIDIA H200",
        "environment": {"driver": "560.35", "runtime": "12.6", "triton": "3.6.0"},
        "default": dict(CONFIG),
        "entries": entries,
    }


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(doc))  # NaN and Infinity are written as JSON's extensions
    return path


def _set(doc: dict[str, Any], where: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    target = doc
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    return doc


CASES = [
    (
        ("entries", 1, "config", "BLOCK_M"),
        float("nan"),
        r"entries\[1\]\.config\['BLOCK_M'\] is nan",
    ),
    (
        ("entries", 0, "config", "BLOCK_K"),
        float("inf"),
        r"entries\[0\]\.config\['BLOCK_K'\] is inf",
    ),
    (("entries", 0, "config", "GROUP_M"), None, r"entries\[0\]\.config\['GROUP_M'\] is None"),
    (("entries", 0, "config", "GROUP_M"), [8], r"is \[8\]; a config value is an integer"),
    (("entries", 1, "config"), {}, r"entries\[1\]\.config is empty"),
    (("default",), {}, r"default is empty"),
    (("entries", 1, "problem", "M"), float("nan"), r"entries\[1\]\.problem\['M'\] is nan"),
    (
        ("entries", 0, "problem", "M"),
        -64,
        r"entries\[0\]\.problem\['M'\] = -64; a dim is a positive",
    ),
    (("entries", 0, "problem", "K"), 0, r"entries\[0\]\.problem\['K'\] = 0"),
    (("entries", 1, "problem", "M"), "128", r"entries\[1\]\.problem\['M'\] is '128'; a dim is an"),
    (("entries", 1, "problem", "M"), "big", r"entries\[1\]\.problem\['M'\] is 'big' \(str\), but"),
    (
        ("entries", 0, "config", "BLOCK-Q"),
        16,
        r"entries\[0\]\.config names 'BLOCK-Q', which is not",
    ),
    (("default", "__class__"), 1, r"default names '__class__', which is not a parameter"),
    (("entries", 1, "problem"), {}, r"entries\[1\]\.problem is empty"),
    (("entries", 0, "time_ms"), float("nan"), r"entries\[0\]\.time_ms is nan"),
    (("entries", 0, "job"), "7", r"entries\[0\]\.job is '7'"),
    (("environment",), ["driver", "560"], r"'environment' must be an object"),
    (("environment",), "cuda 12", r"'environment' must be an object"),
    (("environment",), {"driver": {"nested": 1}}, r"'environment' must be an object"),
    (("device_class",), 7, r"'device_class' must be a string"),
]


@pytest.mark.parametrize(("where", "value", "says"), CASES)
def test_every_entry_is_checked(
    tmp_path: Path, where: tuple[Any, ...], value: Any, says: str
) -> None:
    path = _write(tmp_path, _set(_doc(), where, value))
    with pytest.raises(BundleError, match=says) as info:
        load_bundle(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


SPEC_CASES = [
    (
        ("entries", 1, "config", "BLOCK_Q"),
        16,
        r"entries\[1\]\.config names 'BLOCK_Q', which kernel 'matmul' does not have",
    ),
    (
        ("entries", 0, "config", "BLOCK_M"),
        48,
        r"entries\[0\]\.config\['BLOCK_M'\] = 48 is not one of",
    ),
    (("entries", 0, "config", "BLOCK_M"), "64", r"\['BLOCK_M'\] = '64' is not one of"),
    (("default", "BLOCK_M"), True, r"default\['BLOCK_M'\] = True is not one of"),
    (("entries", 1, "problem", "dtype"), "int7", r"entries\[1\]\.problem: .*int7"),
    (("entries", 0, "problem", "K"), "a lot", r"entries\[0\]\.problem: .*K"),
    (("kernel",), "rmsnorm", r"the bundle is for kernel 'rmsnorm', not 'matmul'"),
]


@pytest.mark.parametrize(("where", "value", "says"), SPEC_CASES)
def test_with_the_spec_every_parameter_and_problem_is_the_kernels(
    tmp_path: Path, where: tuple[Any, ...], value: Any, says: str
) -> None:
    spec = get_spec("matmul")
    doc = _set(_doc(), where, value)
    if where[-1] == "K":  # one entry alone, so only the schema can tell the string dim
        doc["entries"] = doc["entries"][:1]
    path = _write(tmp_path, doc)
    with pytest.raises(BundleError, match=says):
        load_bundle(path, spec)


def test_without_the_spec_a_lone_string_dim_is_refused(tmp_path: Path) -> None:
    doc = _set(_doc(), ("entries", 0, "problem", "K"), "256")
    doc["entries"] = doc["entries"][:1]  # no other entry gives K as an integer
    with pytest.raises(BundleError, match=r"entries\[0\]\.problem\['K'\] is '256'; a dim"):
        load_bundle(_write(tmp_path, doc))


def test_a_good_bundle_loads_with_and_without_the_spec(tmp_path: Path) -> None:
    path = _write(tmp_path, _doc())
    for spec in (None, get_spec("matmul")):
        bundle = load_bundle(path, spec)
        assert bundle.environment["driver"] == "560.35"
        assert bundle.lookup({"M": 128, "N": 256, "K": 256, "dtype": "float16"}) == CONFIG
    no_env = _doc()
    del no_env["environment"]
    assert load_bundle(_write(tmp_path, no_env)).environment == {}


def test_the_table_answers_as_resolve_and_prepares_each_config_once() -> None:
    from search_spaces.bundle import bundle_from_dict

    doc = _doc()
    doc["entries"][1]["config"] = {**CONFIG, "BLOCK_M": 128}
    bundle = bundle_from_dict(doc)
    prepared: list[dict[str, Any]] = []

    def prepare(config: dict[str, Any]) -> tuple[int, int]:
        prepared.append(config)
        return config["BLOCK_M"], len(prepared)

    table = bundle.table(("M", "N", "K", "dtype"), prepare)
    assert table[(64, 256, 256, "float16")] == (64, 1)
    assert table[(128, 256, 256, "float16")] == (128, 2)
    assert table[(100, 256, 256, "float16")] == (128, 2)  # nearest by log2 distance: 128
    assert table[(64, 256, 256, "float16")] == (64, 1)  # a hit: not prepared again
    assert table[(64, 256, 256, "bfloat16")] == (64, 3)  # no entry of its dtype: the default
    assert len(prepared) == 3
    assert table.how == {
        (64, 256, 256, "float16"): "exact",
        (128, 256, 256, "float16"): "exact",
        (100, 256, 256, "float16"): "nearest",
        (64, 256, 256, "bfloat16"): "default",
    }
    for key, value in table.items():
        config = bundle.resolve(dict(zip(table.fields, key, strict=True)))[1]
        assert value[0] == config["BLOCK_M"]
    plain = bundle.table(("M", "N", "K", "dtype"))
    assert plain[(128, 256, 256, "float16")] == doc["entries"][1]["config"]


def test_a_table_key_of_the_wrong_length_or_fields_given_twice_is_refused() -> None:
    from search_spaces.bundle import bundle_from_dict

    bundle = bundle_from_dict(_doc())
    with pytest.raises(BundleError, match="one value per field"):
        bundle.table(("M", "N", "K", "dtype"))[(64, 256)]
    with pytest.raises(BundleError, match="each problem field once"):
        bundle.table(("M", "M"))


def test_resolve_answers_the_same_whatever_the_order_of_the_fields() -> None:
    from search_spaces.bundle import bundle_from_dict

    bundle = bundle_from_dict(_doc())
    one = bundle.resolve({"M": 128, "N": 256, "K": 256, "dtype": "float16"})
    other = bundle.resolve({"dtype": "float16", "K": 256, "N": 256, "M": 128})
    assert one == other and one[0] == "exact"
