"""Variants of the siblings' sharing, replayed by benchmarks/search_suite.py at ea21aa0.

Environment: SF (SHARE_FIRST), SP (SHARE_PROBES), MODE (probes: as shipped, the shared prior
only picks configs to measure; model: the study's model takes the shared prior and nothing is
probed; full: both), SKIPBEST=1 (probe only the sibling problems' fastest configs, not the
shared prior's best). Arguments go to search_suite.py.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from benchmarks import search_suite
from orchestrator.samplers import learned
from orchestrator.samplers.learned import LearnedSampler, Prior

learned.SHARE_FIRST = int(os.environ.get("SF", "8"))
learned.SHARE_PROBES = int(os.environ.get("SP", "1"))
MODE = os.environ.get("MODE", "probes")
SKIPBEST = os.environ.get("SKIPBEST", "0") == "1"


def probe_shared(self: LearnedSampler, fresh) -> None:  # type: ignore[no-untyped-def]
    self._fitted_shared = len(self._shared)
    if self._featurizer is None:
        return
    prior = Prior.fit(
        [*self._prior_trials, *self._shared], self._problem, self._class, self._featurizer
    )
    if prior is None:
        return
    if MODE in ("full", "model"):
        self._prior, self._mu0, self._fitted = prior, prior.mu0, None
    if MODE in ("full", "probes"):
        queued = set(self._share_probes)
        probes = prior.probes[1:] if SKIPBEST else prior.probes
        new = [i for i in probes if fresh[i] and i not in queued][: learned.SHARE_PROBES]
        self._share_probes.extend(new)


LearnedSampler._probe_shared = probe_shared  # type: ignore[method-assign]
search_suite.main(sys.argv[1:])
