"""Vendor decisions on the deployment side: Bundle.decide, tuned(vendor=), launcher_for on the
interpreter (matmul's torch.matmul and a Triton config), and what load_bundle refuses (unknown
backends, a digest that does not match the content), each with one line."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from search_spaces import Vendor
from search_spaces.accuracy import max_rel_error
from search_spaces.bundle import (
    BUNDLE_FORMAT,
    BundleError,
    Decision,
    bundle_digest,
    bundle_from_dict,
    load_bundle,
    tuned,
)
from search_spaces.dispatch import launcher_for
from search_spaces.kernels.matmul import SPEC

TRITON = SPEC.default_config(Vendor.CPU)


def _problem(m: int) -> dict[str, Any]:
    return {"M": m, "N": 16, "K": 16, "dtype": "float32"}


def _doc() -> dict[str, Any]:
    """M=16: the vendor path won; M=32: the Triton config did; digest written last."""
    doc: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "kernel": "matmul",
        "kernel_version": "v",
        "device_class": "cpu",
        "default": dict(TRITON),
        "entries": [
            {
                "problem": _problem(16),
                "backend": "vendor",
                "vendor": "torch.matmul",
                "config": dict(TRITON),
                "time_ms": 0.010,
                "triton_ms": 0.012,
                "vendor_ms": 0.010,
                "noise": 0.02,
                "job": 1,
                "team": "ml",
            },
            {
                "problem": _problem(32),
                "backend": "triton",
                "vendor": "torch.matmul",
                "config": dict(TRITON),
                "time_ms": 0.020,
                "triton_ms": 0.020,
                "vendor_ms": 0.025,
                "noise": 0.02,
                "job": 1,
                "team": "ml",
            },
        ],
    }
    doc["digest"] = bundle_digest(doc)
    return doc


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


def test_decide_exact_nearest_and_default(tmp_path: Path) -> None:
    bundle = load_bundle(_write(tmp_path, _doc()), SPEC)
    assert bundle.decide(_problem(16)) == Decision("vendor", TRITON, "torch.matmul", "exact")
    assert bundle.decide(_problem(32)).backend == "triton"
    # unseen shapes take the nearest entry's decision (log2 distance over the integer dims)
    assert bundle.decide(_problem(8)) == Decision("vendor", TRITON, "torch.matmul", "nearest")
    assert bundle.decide(_problem(64)).backend == "triton"
    assert bundle.decide({**_problem(16), "dtype": "float16"}) == Decision(
        "triton", TRITON, None, "default"
    )
    entry = bundle.entries[0]
    assert (entry.vendor_ms, entry.triton_ms, entry.noise, entry.team) == (0.01, 0.012, 0.02, "ml")


def test_a_nearest_triton_win_carries_over_to_other_batches_only() -> None:
    doc = _doc()
    doc["batch_fields"] = ["M"]
    doc["digest"] = bundle_digest(doc)
    bundle = bundle_from_dict(doc, spec=SPEC)
    assert bundle.batch_fields == ("M",)
    assert bundle.decide(_problem(64)) == Decision("triton", TRITON, "torch.matmul", "nearest")
    # other weights (N) were never compared with the vendor path: it is kept
    wider = {**_problem(32), "N": 32}
    assert bundle.decide(wider) == Decision("vendor", TRITON, "torch.matmul", "nearest")
    # a Triton win names no vendor path in the file: the bundle's other entries name it
    doc["entries"][1]["vendor"] = None
    doc["digest"] = bundle_digest(doc)
    unnamed = bundle_from_dict(doc, spec=SPEC)
    assert unnamed.decide(wider) == Decision("vendor", TRITON, "torch.matmul", "nearest")
    # without the key (a bundle from before it) the nearest decision carries over as it is
    assert bundle_from_dict(_doc(), spec=SPEC).decide(wider).backend == "triton"


def test_batch_fields_must_be_a_list_of_names() -> None:
    doc = {**_doc(), "batch_fields": "M"}
    doc["digest"] = bundle_digest(doc)
    with pytest.raises(BundleError, match="'batch_fields' must be a list of field names"):
        bundle_from_dict(doc)


def test_tuned_calls_the_vendor_fallback_where_the_vendor_path_won() -> None:
    bundle = bundle_from_dict(_doc())
    calls: list[tuple[int, dict[str, Any]]] = []

    def fallback(m: int, **kwargs: Any) -> str:
        calls.append((m, kwargs))
        return "vendor"

    @tuned(bundle, key=lambda m, **_: _problem(m), vendor=fallback)
    def launch(m: int, BLOCK_M: int = 0, **_: Any) -> int:
        return BLOCK_M

    @tuned(bundle, key=lambda m, **_: _problem(m))
    def triton_only(m: int, BLOCK_M: int = 0, **_: Any) -> int:
        return BLOCK_M

    assert launch(16, flag=1) == "vendor" and calls == [(16, {"flag": 1})]
    assert launch(8) == "vendor"  # nearest entry is the vendor-won M=16
    assert launch(32) == TRITON["BLOCK_M"]
    # without a fallback a vendor decision launches the entry's best Triton config
    assert triton_only(16) == TRITON["BLOCK_M"]


@pytest.mark.parametrize(("m", "backend"), [(16, "vendor"), (32, "triton"), (64, "triton")])
def test_launcher_for_writes_the_right_result(
    m: int, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = bundle_from_dict(_doc(), spec=SPEC)
    problem = SPEC.validate_problem(_problem(m))
    inputs = SPEC.build_inputs(problem, "cpu")
    unused = "make_launcher" if backend == "vendor" else "make_vendor_launcher"
    monkeypatch.setattr(SPEC, unused, lambda *_: pytest.fail(f"{unused} called"))
    inputs["out"].fill_(float("nan"))
    launch, decision = launcher_for(SPEC, bundle, problem, inputs)
    assert decision.backend == backend
    launch()
    expected = torch.matmul(inputs["a"].double(), inputs["b"].double())
    assert max_rel_error(inputs["out"], expected) <= SPEC.tolerance(problem)


def test_launcher_for_launches_triton_where_the_spec_lacks_the_vendor_path() -> None:
    doc = _doc()
    doc["entries"][0]["vendor"] = "cublaslt.future"
    doc.pop("digest")
    problem = SPEC.validate_problem(_problem(16))
    inputs = SPEC.build_inputs(problem, "cpu")
    launch, decision = launcher_for(SPEC, bundle_from_dict(doc), problem, inputs)
    assert (decision.backend, decision.vendor, decision.config) == (
        "triton",
        "cublaslt.future",
        TRITON,
    )
    launch()
    expected = torch.matmul(inputs["a"].double(), inputs["b"].double())
    assert max_rel_error(inputs["out"], expected) <= SPEC.tolerance(problem)


def test_unknown_backend_is_refused_on_load(tmp_path: Path) -> None:
    doc = _doc()
    doc["entries"][1]["backend"] = "cudnn"
    doc["digest"] = bundle_digest(doc)
    with pytest.raises(BundleError) as refused:
        load_bundle(_write(tmp_path, doc))
    assert "entries[1].backend is 'cudnn'; a backend is one of triton, vendor" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_vendor_backend_without_a_path_is_refused() -> None:
    doc = _doc()
    doc["entries"][0]["vendor"] = None
    doc.pop("digest")
    with pytest.raises(BundleError, match=r"entries\[0\] says backend 'vendor' but names no"):
        bundle_from_dict(doc)


def test_digest_is_exposed_and_a_tampered_entry_is_refused(tmp_path: Path) -> None:
    doc = _doc()
    assert load_bundle(_write(tmp_path, doc)).digest == doc["digest"]
    unsigned = {k: v for k, v in doc.items() if k != "digest"}
    assert load_bundle(_write(tmp_path, unsigned)).digest == doc["digest"]  # computed

    tampered = copy.deepcopy(doc)
    tampered["entries"][0]["backend"] = "triton"  # the digest is now stale
    with pytest.raises(BundleError) as refused:
        load_bundle(_write(tmp_path, tampered))
    message = str(refused.value)
    assert "\n" not in message
    assert f"its digest {doc['digest'][:16]}... does not match its content" in message
    assert "pull it again" in message


def test_a_tie_between_nearest_entries_goes_to_the_vendor_win() -> None:
    """Attention's (batch 1, seq 512) is as near (batch 1, seq 8192), a Triton win, as (batch 16,
    seq 512), a vendor win: the vendor path is kept, whichever entry is listed first."""
    from search_spaces.kernels.flash_attention import SPEC as ATTENTION

    def entry(batch: int, seq: int, backend: str) -> dict[str, Any]:
        problem = {
            "batch": batch, "max_seqlen": seq, "pattern": "uniform", "q_heads": 32,
            "kv_heads": 8, "head_dim": 128, "causal": True, "dtype": "bfloat16",
        }  # fmt: skip
        return {"problem": problem, "backend": backend, "vendor": "sdpa_cudnn", "config": {}}

    default = ATTENTION.default_config(Vendor.CPU)
    entries = [entry(1, 8192, "triton"), entry(16, 512, "vendor")]
    for order in (entries, entries[::-1]):
        doc = {"format": BUNDLE_FORMAT, "kernel": "flash_attention", "default": default,
               "batch_fields": ["batch", "max_seqlen"],
               "entries": [{**e, "config": default} for e in order]}  # fmt: skip
        bundle = bundle_from_dict(doc, spec=ATTENTION)
        short = {**order[0]["problem"], "batch": 1, "max_seqlen": 512}
        assert bundle.decide(short).backend == "vendor"
        assert bundle.decide({**short, "max_seqlen": 4096}).backend == "triton"  # nearer the win
