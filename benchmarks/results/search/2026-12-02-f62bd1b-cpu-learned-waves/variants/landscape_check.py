"""Per landscape: configs within 2% of the optimum, the best configs' wave features (132 SMs), and
how much of the log-time variance a ridge model over the scaled parameters + features explains,
with the spec's features only and with each wave variant added (5-fold CV R^2, all configs).
python landscape_check.py LANDSCAPE..."""

import sys

import numpy as np

import orchestrator.samplers.learned as L
from benchmarks import search as S
from search_spaces import get_spec

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from waves_exp import launch_programs, wave_features


def cv_r2(x, y, folds=5, ridge=1e-3):
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    pred = np.empty_like(y)
    for f in range(folds):
        test = idx[f::folds]
        train = np.setdiff1d(idx, test)
        a = np.c_[x[train], np.ones(len(train))]
        w = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ y[train])
        pred[test] = np.c_[x[test], np.ones(len(test))] @ w
    return 1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum()


for path in sys.argv[1:]:
    b = S.load_bench(path)
    spec = get_spec(b.kernel)
    lm = S.read_landscape(path)
    problem = dict(lm.problem)
    ok = [
        (r.config, r.time_ms)
        for r in lm.results
        if r.time_ms is not None and r.outcome.value == "ok"
    ]
    y = np.log([t for _, t in ok])
    near = sum(t <= b.optimum * 1.02 for _, t in ok)
    best = sorted(ok, key=lambda r: r[1])[:3]
    print(f"{b.name} ok {len(ok)} within2% {near}")
    for c, t in best:
        p, s = launch_programs(problem, c, 132)
        print(f"   {t:.4f} programs {p} steps/prog {s:.0f} waves {-(-p // 132)} {c}")
    for v in ("base", "fill", "steps", "all"):

        def hook(pr, c, v=v, spec=spec):
            return {**spec.features(pr, c), **wave_features(v, pr, c, 132)}

        fz = L.Featurizer(b.space.params_for(b.limits.vendor), problem, hook, [c for c, _ in ok])
        x = fz.matrix([c for c, _ in ok])
        x2 = np.c_[x, x**2]
        print(f"   {v}: CV R2 linear {cv_r2(x, y):.3f} +squares {cv_r2(x2, y):.3f}")
