"""The MANIFEST's table from the runs' reports: python3 table.py DIR (runs in the order they ended)."""

import json
import pathlib
import sys

runs = sorted(
    pathlib.Path(sys.argv[1]).glob("runs/*.fleet_sim.json"), key=lambda p: p.stat().st_mtime
)
print(
    "| run | trials/s | of them reused | measured | slots busy | machine CPU per trial | cores busy "
    "| drivers ms/trial | PostgreSQL ms/trial | speed probe µs, before / during | jobs at the end |"
)
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for p in runs:
    r = json.loads(p.read_text())
    ms, cores = r["cpu"]["ms_per_trial"], r["cpu"]["cores"]
    drivers = sum(v for k, v in ms.items() if k.endswith("drivers"))
    pg = sum(v for k, v in ms.items() if k.startswith("postgres"))
    speed = r["speed_probe_us"]
    jobs = ", ".join(f"{v} {k}" for k, v in r["jobs_by_status"].items())
    t, reused = r["trials_per_s_steady"], r["reused_per_s_steady"]
    print(
        f"| {p.name.removesuffix('.fleet_sim.json')} | {t:.1f} | {reused:.1f} | {t - reused:.1f} "
        f"| {100 * r['slot_busy_share']:.1f}% | {ms['machine busy']:.3f} ms "
        f"| {cores['machine busy']:.2f} | {drivers:.3f} | {pg:.3f} "
        f"| {speed['idle']:.0f} / {speed['run_median']:.0f} | {jobs} |"
    )
