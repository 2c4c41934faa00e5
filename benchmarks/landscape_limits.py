"""How much the recorded matmul landscapes tell a search about their configs within 2% of the optimum.

Usage (repo root): python3 benchmarks/landscape_limits.py > limits.md
(recorded: benchmarks/results/search/2026-12-04-c8269d4-cpu-information-limits/limits.md)

Three tables over the 19 H200 matmul landscapes (benchmarks/landscapes/h200/matmul_*.json.gz),
each config as recorded (no equivalence classes):

1. in-sample: a ridge model of log time fitted to *every* config of the landscape itself, additive
   (intercept, one column per parameter value, the spec's four derived features and their squares)
   or with every pairwise product of the value columns and of the features added. Where does the
   model's order put the first config within 2%? A search guided by such a model fitted to its
   first 20 trials has less to go on.
2. transfer: the best rank that any of the landscape's 2% configs has in any *other* landscape's
   timing, and in the nearest problem's (L1 over log2 of M, N, K): what a prior made of other
   problems' measurements of the same configs can know.
3. leave one problem out: the same two ridge models fitted to the 18 other landscapes (each
   problem's log times standardized, weighted by learned's relevance exp(-distance)), ranking the
   held-out landscape's configs.
"""

import glob
import gzip
import json
import math
import os

import numpy as np

PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K", "num_stages", "num_warps")
PATHS = sorted(glob.glob("benchmarks/landscapes/h200/matmul_*.json.gz"))


def load(path):
    with gzip.open(path) as f:
        data = json.load(f)
    ok = sorted((r for r in data["results"] if r["outcome"] == "ok"), key=lambda r: r["time_ms"])
    name = os.path.basename(path).removeprefix("matmul_").removesuffix(".json.gz")
    name = name.replace("_dtypebfloat16", "").replace("_bfloat16", "")
    configs = [r["config"] for r in ok]
    return name, data["problem"], configs, np.log([r["time_ms"] for r in ok])


LANDSCAPES = [load(p) for p in PATHS]
VALUES = {k: sorted({c[k] for _, _, cs, _ in LANDSCAPES for c in cs}) for k in PARAMS}


def derived(problem, c):
    """The matmul spec's four features (search_spaces/kernels/matmul.py ``features``), bf16."""
    m, n, k = problem["M"], problem["N"], problem["K"]
    bm, bn, bk, split = c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["SPLIT_K"]
    rows, cols = -(-m // bm), -(-n // bn)
    return [
        math.log2(rows * cols * split),
        math.log2(-(-k // (split * bk))),
        math.log2((bm + bn) * bk * 2),
        m * n / (rows * bm * cols * bn),
    ]


def design(problem, configs, pairwise):
    onehot = np.array([[float(c[k] == v) for k in PARAMS for v in VALUES[k]] for c in configs])
    feats = np.array([derived(problem, c) for c in configs]) / 10
    columns = [np.ones((len(configs), 1)), onehot, feats, feats**2]
    if pairwise:
        upper = np.triu_indices(onehot.shape[1], 1)
        columns.append((onehot[:, :, None] * onehot[:, None, :])[:, upper[0], upper[1]])
        columns.append((feats[:, :, None] * feats[:, None, :]).reshape(len(configs), -1))
    return np.hstack(columns)


def ridge(x, y, w, penalty):
    a = x.T @ (x * w[:, None]) + penalty * w.max() * np.eye(x.shape[1])
    return np.linalg.solve(a, x.T @ (w * y))


def first_within(pred, y):
    """0-based place, in the model's order, of the first config within 2% of the optimum, and the
    best true ratio among the model's first 1, 4 and 8 configs."""
    ratio = np.exp(y[np.argsort(pred, kind="stable")] - y.min())
    return int(np.argmax(ratio <= 1.02)), [float(ratio[:k].min()) for k in (1, 4, 8)]


def distance(a, b):
    return sum(abs(math.log2(a[k]) - math.log2(b[k])) for k in "MNK")


def row(name, near, place, best):
    return f"| {name} | {near} | {place} | " + " / ".join(f"{r:.3f}" for r in best) + " |"


print("## 1. In-sample: a model fitted to all of the landscape's own configs\n")
print(
    "| landscape | configs within 2% | additive: place of the first 2% config | additive: best ratio in its first 1 / 4 / 8 | pairwise: place | pairwise: best ratio in its first 1 / 4 / 8 |"
)
print("|---|---|---|---|---|---|")
for name, problem, configs, y in LANDSCAPES:
    near = int((y <= y.min() + math.log(1.02)).sum())
    cells = []
    for pairwise in (False, True):
        x = design(problem, configs, pairwise)
        place, best = first_within(x @ ridge(x, y, np.ones(len(y)), 1e-3), y)
        cells += [str(place), " / ".join(f"{r:.3f}" for r in best)]
    print(f"| {name} | {near} | " + " | ".join(cells) + " |")

print("\n## 2. Transfer: the 2% configs' best rank in the other landscapes (0 = their fastest)\n")
print(
    "| landscape | configs within 2% | best rank in any other | where | rank in the nearest problem | nearest |"
)
print("|---|---|---|---|---|---|")
for name, problem, configs, y in LANDSCAPES:
    near = [
        tuple(c[k] for k in PARAMS)
        for c, t in zip(configs, y, strict=True)
        if t <= y.min() + math.log(1.02)
    ]
    found = []
    for other, p2, c2, _ in LANDSCAPES:
        if other == name:
            continue
        rank = {tuple(c[k] for k in PARAMS): i for i, c in enumerate(c2)}
        found.append((min(rank[c] for c in near), distance(problem, p2), other))
    best, nearest = min(found), min(found, key=lambda f: f[1])
    print(f"| {name} | {len(near)} | {best[0]} | {best[2]} | {nearest[0]} | {nearest[2]} |")

print("\n## 3. Leave one problem out: models fitted to the 18 other landscapes\n")
print(
    "| landscape | additive: place of the first 2% config | additive: best ratio in its first 1 / 4 / 8 | pairwise: place | pairwise: best ratio in its first 1 / 4 / 8 |"
)
print("|---|---|---|---|---|")
places = {False: [], True: []}
for name, problem, configs, y in LANDSCAPES:
    cells = []
    for pairwise in (False, True):
        xs, zs, ws = [], [], []
        for other, p2, c2, y2 in LANDSCAPES:
            if other != name:
                xs.append(design(p2, c2, pairwise))
                zs.append((y2 - y2.mean()) / y2.std())
                ws.append(np.full(len(c2), math.exp(-distance(problem, p2))))
        coef = ridge(np.vstack(xs), np.concatenate(zs), np.concatenate(ws), 1.0)
        place, best = first_within(design(problem, configs, pairwise) @ coef, y)
        places[pairwise].append(place)
        cells += [str(place), " / ".join(f"{r:.3f}" for r in best)]
    print(f"| {name} | " + " | ".join(cells) + " |")
for pairwise, found in places.items():
    found = np.array(found)
    print(
        f"\n{'pairwise' if pairwise else 'additive'}: the first 2% config among the model's first 4"
        f" on {(found < 4).sum()} of {found.size}, first 8 on {(found < 8).sum()}, mean place {found.mean():.1f}"
    )

pairs = sum(len(VALUES[a]) * len(VALUES[b]) for i, a in enumerate(PARAMS) for b in PARAMS[i + 1 :])
print(f"\nvalue pairs of two of the landscapes' {len(PARAMS)} parameters: {pairs}")
