"""A Markdown table of a results folder's fleet runs (``DIR/runs/NAME.fleet_sim.json``, in the
order ``DIR/load.txt`` says they ended, else by name): rows and measured trials per second, slots
busy, CPU per trial by component, the speed probe, the jobs at the end; then, for runs that have
them, the phases (trials/s, jobs running and CPU per trial in each span of the steady window).

    python3 benchmarks/fleet/runs_table.py benchmarks/results/fleet_sim/FOLDER
"""

import json
import pathlib
import sys

folder = pathlib.Path(sys.argv[1])
log = folder / "load.txt"  # "HH:MM:SS end NAME rc=0" lines, in the order the runs ended
ended = (
    [ln.split()[2] for ln in log.read_text().splitlines() if " end " in ln] if log.exists() else []
)


def _order(path: pathlib.Path) -> tuple[int, str]:
    name = path.name.removesuffix(".fleet_sim.json")
    return (ended.index(name) if name in ended else len(ended), name)


runs = [
    (p, json.loads(p.read_text())) for p in sorted(folder.glob("runs/*.fleet_sim.json"), key=_order)
]
print(
    "| run | trials/s | of them reused | measured | slots busy | machine CPU per trial | cores busy "
    "| drivers ms/trial | PostgreSQL ms/trial | speed probe µs, before / during | jobs at the end |"
)
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for p, r in runs:
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

phased = [(p, r) for p, r in runs if r.get("phases")]
if phased:
    print()
    print("| run | from s | trials/s | jobs running | machine ms/trial | servers ms/trial |")
    print("|---|---:|---:|---:|---:|---:|")
    for p, r in phased:
        for ph in r["phases"]:
            print(
                f"| {p.name.removesuffix('.fleet_sim.json')} | {ph['from_s']} "
                f"| {ph['trials_per_s']} | {ph['jobs_running']} | {ph['machine_ms_per_trial']} "
                f"| {ph['servers_ms_per_trial']} |"
            )
