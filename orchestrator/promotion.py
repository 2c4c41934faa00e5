"""Finishing a job: re-time each study's fastest configs in a fresh process, promote the winner.

The top ``k`` configs of every study (those with an ``ok`` row) are timed again on a worker of
the study's class, interleaved, ``rounds`` times; the winner is the lowest median of those
re-timings (a config whose re-timing failed keeps its measured time) and is upserted as the
key's best only if faster than the stored best (a conditional upsert).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from orchestrator.ledger import Ledger, OpenJob, StudyRows
from orchestrator.pool import Pool, RetimeJob
from orchestrator.progress import Reporter
from orchestrator.study import Study
from search_spaces.space import Config

#: Per study id: the promoted config, its re-timed time (ms), whether it became the key's best.
Winners = dict[int, tuple[Config, float, bool]]


def promote(
    job: OpenJob,
    studies: Sequence[tuple[StudyRows, Study]],
    pool: Pool,
    ledger: Ledger,
    rounds: int,
    reporter: Reporter,
) -> Winners:
    """Re-time and promote (see the module docstring); the winner of each study that had any
    ``ok`` config."""
    tops = [study.ranked(job.spec.top_k) for _, study in studies]
    jobs: list[RetimeJob] = [
        (rows.plan.class_key, job.spec.kernel, dict(rows.plan.problem), [r.config for r in top])
        for (rows, _), top in zip(studies, tops, strict=True)
    ]
    retimed: Sequence[list[list[float]] | None] = [None] * len(jobs)
    if any(tops):
        reporter.note("re-timing the top configs in a fresh process")
        retimed = pool.retime(jobs, rounds)
    winners: Winners = {}
    for (rows, _), top, medians in zip(studies, tops, retimed, strict=True):
        if not top:
            continue
        times = [
            statistics.median(medians[i]) if medians is not None and medians[i] else r.value
            for i, r in enumerate(top)
        ]
        best = min(range(len(top)), key=lambda i: times[i])
        winner = top[best]
        promoted = ledger.promote(job, rows, winner.config, times[best], winner.row)
        winners[rows.study_id] = (winner.config, times[best], promoted)
    return winners
