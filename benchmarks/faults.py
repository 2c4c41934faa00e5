"""Fault-injection table (issues 14 and 45): run every fault scenario's tests, count what held.

``python benchmarks/faults.py [--out DIR] [--no-postgres] [--only PREFIX]`` runs the tests of each
scenario (``--only 45.``: issue 45's) in one pytest process (tests/faults/ and the tests elsewhere that already cover a scenario), with
``TUNEFLEET_FAULTS_LOG`` set so that every check of tests/faults/checker.py is logged, and
prints per scenario: tests tried / held, trials checked (final rows), lost, duplicated. Writes
``table.md``, ``checks.jsonl`` and ``junit.xml`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
F = "tests/faults/"

#: Scenario -> the pytest node ids (a file: all its tests) that run it.
SCENARIOS: dict[str, list[str]] = {
    "1 db upgrade of an existing database": [
        "tests/db/test_migrations.py::test_db_upgrade_command_migrates_an_existing_database"
    ],
    "2 two drivers on one job (lease)": [
        "tests/orchestrator/app/test_jobs.py::test_run_refuses_a_live_lease_and_a_done_job_before_ray",
        "tests/orchestrator/app/test_jobs.py::test_lease_keeper_renews_refuses_notices_loss_and_releases",
    ],
    "3 SQLite file deleted / read-only mid-job": [
        F
        + "test_driver_faults.py::test_the_sqlite_file_deleted_mid_job_stops_it_with_nothing_written_anywhere",
        "tests/db/test_alive.py::test_read_only_sqlite_file_is_noticed",
    ],
    "4 trial killed from outside, timeouts (retryable)": [
        F
        + "test_driver_faults.py::test_a_trial_killed_from_outside_is_measured_once_more_not_taken_as_its_verdict",
        F + "test_driver_faults.py::test_a_config_that_crashes_twice_keeps_its_crash",
        F
        + "test_driver_faults.py::test_resume_re_measures_a_provisional_config_left_without_its_final_row",
    ],
    "5 crash-retired only worker": [
        F + "test_ray_faults.py::test_a_worker_retired_for_crashes_is_replaced_and_the_job_promotes"
    ],
    "6 kernel writing its inputs": [
        "tests/workers/test_trial.py::test_a_kernel_that_writes_its_inputs_is_judged_on_the_inputs_as_built"
    ],
    "7 transient database errors": [
        F
        + "test_driver_faults.py::test_a_postgresql_connection_killed_between_writes_loses_nothing",
        F
        + "test_driver_faults.py::test_another_sqlite_writer_holding_the_lock_past_the_busy_timeout_fails_nothing",
    ],
    "8 exposure: loopback Ray, kept workers, stored kernels": [
        F + "test_ray_faults.py::test_the_local_ray_listens_on_loopback_only",
        F + "test_ray_faults.py::test_stopping_kept_workers_leaves_another_owners_running",
        "tests/orchestrator/run/test_stored_kernels.py::test_a_planted_job_row_imports_nothing",
    ],
    "9 bad bundles": ["tests/orchestrator/export/test_bundle.py::test_bad_bundles"],
    "10 SIGTERM, Ctrl-C, Ray address, timeouts, CPU OOM": [
        F + "test_cli_faults.py",
        F
        + "test_driver_faults.py::test_the_spec_timeouts_reach_the_runner_a_hanging_kernel_costs_two_seconds",
        F + "test_driver_faults.py::test_an_unreachable_ray_address_fails_at_once_in_one_line",
        "tests/workers/test_runner.py::test_cpu_out_of_memory_in_the_trial_is_invalid",
    ],
    "11 code injection into pull --format triton": [
        "tests/orchestrator/export/test_bundle.py::test_export_triton_writes_database_text_as_literals_only"
    ],
    "12 output errors": ["tests/orchestrator/commands/test_outputs.py"],
    "SIGKILL of the driver, then resume": [
        "tests/orchestrator/commands/test_cli.py::test_resume_after_the_driver_is_killed"
    ],
    "user kernels that hang, exit, segfault, raise, return garbage": [
        "tests/workers/test_runner.py::test_failure_is_classified_and_runner_goes_on"
    ],
    "concurrent best-config writers": [
        "tests/db/test_storage.py::TestStorage::test_upsert_best_keeps_fastest_under_concurrent_processes",
        "tests/db/test_storage.py::TestStorage::test_upsert_best_is_one_atomic_statement",
    ],
    "corrupted landscapes": ["tests/workers/test_replay.py::test_bad_files"],
    "YAML tags that would run code": [F + "test_input_faults.py"],
    "45.1 a driver frozen past its lease (SIGSTOP) writes nothing after the takeover": [
        F + "test_lease_faults.py::test_a_frozen_driver_writes_nothing_once_its_job_is_taken_over"
    ],
    "45.2 two drivers of one host; a host clock an hour off": [
        F
        + "test_lease_faults.py::test_two_drivers_of_one_host_have_distinct_owners_and_one_runs_the_job",
        F + "test_lease_faults.py::test_a_host_clock_off_by_an_hour_changes_no_lease",
    ],
    "45.3 killed worker process, zero studies: no false done": [
        F
        + "test_lease_faults.py::test_a_killed_worker_process_is_replaced_and_no_job_is_falsely_done",
        F
        + "test_lease_faults.py::test_a_job_with_no_study_to_run_fails_with_its_reason_never_done",
        F
        + "test_lease_faults.py::test_replacements_back_off_and_stop_at_their_cap_and_are_reported",
    ],
    "45.4 NUL and lone surrogates in a kernel's text": [
        F + "test_text_faults.py",
        "tests/db/test_text.py",
    ],
    "45.5 a sick scheduler is a 503": ["tests/server/test_health.py"],
    "45.8 a config lost with the only worker: its final row on resume": [
        F
        + "test_lease_faults.py::test_a_config_lost_with_the_only_worker_gets_its_final_row_on_resume"
    ],
    "45.10 read-only SQLite (file, WAL, folder) mid-job, permissions binding: one line, exit 2": [
        F + "test_readonly_faults.py"
    ],
    "45.11 kill -9 of a driver: its local Ray gone in 10 s; an attached cluster kept": [
        F + "test_kill_faults.py"
    ],
    "45.11 SIGTERM on tune with a trial running: exit 143 within 10 s": [
        F + "test_cli_faults.py::test_sigterm_ends_a_tune_within_seconds_while_its_trial_still_runs"
    ],
    "45.11 /docs and /redoc: no third-party script, CSP script-src 'self'": [
        "tests/server/test_docs.py"
    ],
}


def _nodeid(case: ET.Element) -> str:
    path = case.get("classname", "").replace(".", "/")
    parts = path.split("/")
    # classname is module.path[.Class]: the file is the longest prefix that exists
    for n in range(len(parts), 0, -1):
        candidate = "/".join(parts[:n]) + ".py"
        if (ROOT / candidate).exists():
            rest = parts[n:]
            return "::".join([candidate, *rest, case.get("name", "")])
    return f"{path}::{case.get('name', '')}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="Folder for table.md and logs.")
    parser.add_argument("--no-postgres", action="store_true", help="Leave out postgres tests.")
    parser.add_argument(
        "--only", default="", help="Run only the scenarios whose name starts with this."
    )
    args = parser.parse_args()
    scenarios = {k: v for k, v in SCENARIOS.items() if k.startswith(args.only)}
    out = args.out or Path(tempfile.mkdtemp(prefix="faults-"))
    out.mkdir(parents=True, exist_ok=True)
    log, junit = out / "checks.jsonl", out / "junit.xml"
    log.unlink(missing_ok=True)
    selection = sorted({node for nodes in scenarios.values() for node in nodes})
    keyword = []
    if args.no_postgres:
        keyword = ["-m", "not postgres"]
    env = {**os.environ, "TUNEFLEET_FAULTS_LOG": str(log), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    subprocess.run([*cmd, *keyword, *selection], cwd=ROOT, env=env, check=False)

    results: dict[str, bool] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        failed = case.find("failure") is not None or case.find("error") is not None
        results[_nodeid(case)] = not failed
    checks: dict[str, list[dict[str, object]]] = defaultdict(list)
    if log.exists():
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            checks[str(entry["test"])].append(entry)

    rows = [
        "| scenario | tests tried | held | trials checked | lost | duplicated |",
        "|---|---|---|---|---|---|",
    ]
    totals = [0, 0, 0, 0, 0]
    scenarios_held = 0
    for scenario, prefixes in scenarios.items():
        tests = [t for t in results if any(t.startswith(p) for p in prefixes)]
        held = sum(results[t] for t in tests)
        entries = [e for t in tests for e in checks.get(t, [])]
        final = sum(int(e["final"]) for e in entries)  # type: ignore[call-overload]
        lost = sum(int(e["lost"]) for e in entries)  # type: ignore[call-overload]
        dup = sum(int(e["duplicated"]) for e in entries)  # type: ignore[call-overload]
        checked = str(final) if entries else "-"
        rows.append(f"| {scenario} | {len(tests)} | {held} | {checked} | {lost} | {dup} |")
        for i, v in enumerate((len(tests), held, final, lost, dup)):
            totals[i] += v
        scenarios_held += int(bool(tests) and held == len(tests))
    rows.append(
        f"| **all: {scenarios_held} of {len(scenarios)} scenarios held** | {totals[0]} | "
        f"{totals[1]} | {totals[2]} | {totals[3]} | {totals[4]} |"
    )
    table = "\n".join(rows)
    (out / "table.md").write_text(table + "\n")
    print(table)
    print(f"\nwritten under {out}")


if __name__ == "__main__":
    main()
