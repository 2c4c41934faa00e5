"""Run benchmarks/search.py with `learned` registered as the variant named by $V: the module
constants of orchestrator/samplers/learned.py that the variant names are set before each
sampler is built (see ../MANIFEST.md; the PATTERN and STALL variants need the uncommitted
step of learned.py that had those constants)."""

import os
import sys

import orchestrator.samplers.learned as L
from orchestrator import samplers

VARIANTS = {
    "base": {},
    "mv1": {"PATTERN": ("near", "ei", "move", "move")},  # 2 local moves per batch
    "mv2": {"PATTERN": ("move", "ei")},  # moves replace near
    "mv3": {"PATTERN": ("near", "ei", "move", "ei")},
    "mv4": {"PATTERN": ("move", "ei", "near", "move")},
    "st16": {"STALL": 16, "PATTERN_STALLED": ("move", "ei")},
    "st8": {"STALL": 8, "PATTERN_STALLED": ("move", "move", "near", "ei")},
    "mv2s10": {"PATTERN": ("move", "ei"), "STARTUP": 10},
    "mv2s6": {"PATTERN": ("move", "ei"), "STARTUP": 6},
    "mv0s4": {"PATTERN": ("move",)},
    "mv0s10": {"PATTERN": ("move",), "STARTUP": 10},
    "mvmmes": {"PATTERN": ("move", "move", "move", "ei")},
    "mvmmen": {"PATTERN": ("move", "ei", "move", "near")},
    "mmen": {"PATTERN": ("move", "move", "ei", "near")},
    "mmem": {"PATTERN": ("move", "move", "ei", "move")},
    "ei3": {"EI_EVERY": 3},
    "mv1s8": {"PATTERN": ("near", "ei", "move", "move"), "STARTUP": 8},
}
DEFAULTS = {
    k: getattr(L, k)
    for k in {k for v in VARIANTS.values() for k in v} | {"PATTERN", "STARTUP", "EI_EVERY"}
    if hasattr(L, k)
}


def make(name):
    def factory(c):
        for k, v in DEFAULTS.items():
            setattr(L, k, v)
        for k, v in VARIANTS[name].items():
            setattr(L, k, v)
        from orchestrator.samplers.learned import LearnedSampler

        return LearnedSampler(
            c.encoding,
            c.seed,
            problem=dict(c.problem) or None,
            device_class=c.device_class,
            features=c.kernel.features if c.kernel is not None else None,
            prior=c.prior,
            default=c.kernel.default_for(c.encoding.limits) if c.kernel is not None else None,
            startup=L.STARTUP,
        )

    return factory


samplers.register("learned", make(os.environ.get("V", "base")), help="variant")

from benchmarks.search import main  # noqa: E402  (after the registration)

main(sys.argv[1:])
