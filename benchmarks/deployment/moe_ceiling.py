"""The roofline ceiling of an MoE model's swapped expert GEMMs, from a recorded deployment run.

Usage: python benchmarks/deployment/moe_ceiling.py RES MODEL [SHARE]

For reports recorded before the deployment table had its ceiling column. Per row of each
``RES/MODEL/PHASE-tuned/report.json`` (run.sh's layout): the ``fused_moe`` problems of the row's
``vendor_vs_model`` list whose exact bundle entry decided ``triton`` (one call per MoE layer, so its GPU time per
forward is the model op's ms times the report's layers), their entries in the ``fused_moe`` bundle
under ``RES/bundle``, and workers.profiling.bound's ``amdahl`` with ``floor_ms``: prints the
measured change, the bound those problems allow (the table's, where they are all it swapped), the
layer bound (the same with each block's time split between its GEMMs by their vendor times,
workers.profiling.emit.measured_split: the block's share times its kernel speed-up; the table's
bound for reports of profile runs that split so) and the ceiling (the same problems at the
device's roofline; with SHARE, a number in (0, 1], at that share of it: the floors divided by
SHARE). Exit 2 on bad input (one line).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from search_spaces.bundle import BundleEntry

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent)]


def _decided_triton(entry: BundleEntry | None) -> bool:
    return entry is not None and entry.backend == "triton"


def _scaled(floor: float | None, share: float) -> float | None:
    return None if floor is None else floor / share


def rows(res: Path, model: str, share: float = 1.0) -> list[dict[str, Any]]:
    """Per swapped row with fused_moe problems: phase, batch, mode, change, bound, layer bound,
    ceiling."""
    from search_spaces.bundle import load_bundle
    from workers.profiling.bound import amdahl, exact_entry, floor_ms
    from workers.profiling.emit import HotShape, measured_split
    from workers.profiling.swap import FIELDS
    from workers.profiling.trace import MOE_ANNOTATION

    paths = sorted((res / "bundle").glob("fused_moe-*.json"))
    if len(paths) != 1:
        raise ValueError(f"{res / 'bundle'} holds {len(paths)} fused_moe bundles, not one")
    bundle = load_bundle(paths[0])

    def entry_of(_kernel: str, problem: dict[str, Any]) -> BundleEntry | None:
        return exact_entry(bundle, FIELDS["fused_moe"], problem)

    reports = sorted((res / model).glob("*-tuned/report.json"))
    if not reports:
        raise ValueError(f"no {res / model}/*-tuned/report.json: give run.sh's RES and a model")
    out = []
    for path in reports:
        report = json.loads(path.read_text())
        layers = report["layers"]
        for r in report["with_bundle"]["rows"]:
            # One expert block per token count in a row: its two GEMMs share an op name.
            shapes = [
                HotShape(
                    "fused_moe",
                    v["problem"],
                    f"{MOE_ANNOTATION} M={v['problem']['M']}",
                    v["model_ms"] * 1e3 * layers,
                    layers,
                )
                for v in r["vendor_vs_model"]
                if v["kernel"] == "fused_moe"
            ]
            split = measured_split(shapes, lambda k, p: getattr(entry_of(k, p), "vendor_ms", None))
            bound, layer = (
                amdahl(
                    [(s.kernel, s.problem, s.weight_us) for s in these],
                    lambda k, p: _decided_triton(entry_of(k, p)),
                    entry_of,
                    lambda k, p: _scaled(floor_ms(bundle, p), share),
                    r["baseline_ms"] * 1e3,
                )
                for these in (shapes, split)
            )
            if bound is not None and layer is not None:
                out.append(
                    {
                        "phase": r["phase"],
                        "batch": r["batch"],
                        "mode": r["mode"],
                        "change": r["change"],
                        "bound": bound.change,
                        "layer_bound": layer.change,
                        "ceiling": bound.ceiling,
                    }
                )
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("error: usage: moe_ceiling.py RES MODEL [SHARE]", file=sys.stderr)
        return 2
    try:
        share = float(argv[2]) if len(argv) == 3 else 1.0
        if not 0 < share <= 1:
            raise ValueError(f"SHARE must be in (0, 1], got {argv[2]}")
        found = rows(Path(argv[0]), argv[1], share)
    except (ValueError, OSError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("| phase | batch | mode | change | bound | layer bound | ceiling | best speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    for r in found:
        best = "-" if r["ceiling"] is None else f"{1 / (1 + r['ceiling']):.3f}x"
        print(
            f"| {r['phase']} | {r['batch']} | {r['mode']} | {_pct(r['change'])} "
            f"| {_pct(r['bound'])} | {_pct(r['layer_bound'])} | {_pct(r['ceiling'])} | {best} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
