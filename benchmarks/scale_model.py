"""The scale model of docs/performance.md ("Scale model"): fit per-batch costs from
``benchmarks/staged_commit.py``'s JSON lines, check the predicted words/s at every measured
point, and print the predicted curve to 64 executors.

    python benchmarks/staged_commit.py --part commit > commit.jsonl
    python benchmarks/staged_commit.py --part throughput --executors 1 > tp1.jsonl
    python benchmarks/staged_commit.py --part throughput --executors 2 > tp2.jsonl
    python benchmarks/scale_model.py commit.jsonl tp1.jsonl tp2.jsonl

Model, for a batch of W words and K distinct keys, N executor cores, S shards, M batches
in flight (3), all times per batch:

    job(N)     = j0 + jt * N                       a Spark job's fixed cost (its tasks' launch)
    process(N) = job(N) + W * p / N                the processing job (count + stage)
    commit(S)  = c0 + K * ck / S                   the apply on S shards at once, and the record
    period     = max(commit(S), process(N) / M, job(N), cpu)
    words/s    = W / period

``cpu`` is (W * p + commit(S)) / cores when executors and shards share ``cores`` cores
(this machine: 2); on a cluster with cores of their own it does not bind.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def lines(paths: list[str]) -> list[dict[str, Any]]:
    out = []
    for p in paths:
        with open(p) as f:
            out += [json.loads(x) for x in f if x.startswith("{")]
    return out


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares ``y = a + b x``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


def main() -> None:
    rows = lines(sys.argv[1:])
    commit = [r for r in rows if r.get("part") == "commit" and r["path"] == "staged" and r["tasks"] == 2]
    tput = [r for r in rows if r.get("part") == "throughput"]
    floors = [(r["tasks"], r["job_floor_ms"]) for r in rows if r.get("part") == "commit"]
    floors += [(r["executors"], r["job_floor_ms"]) for r in tput]
    j0, jt = fit_line([t for t, _ in floors], [f for _, f in floors])
    fits = {}
    for s in sorted({str(r["shards"]) for r in commit}):
        pts = [r for r in commit if str(r["shards"]) == s]
        fits[s] = fit_line([r["keys_per_batch"] for r in pts], [r["commit_p50_ms"] for r in pts])
    one = [r for r in tput if r["executors"] == 1]
    p = sum((r["alone_processing_p50_ms"] - r["job_floor_ms"]) / r["words_per_batch"] for r in one) / len(one)
    print(json.dumps({"model": "fit", "j0_ms": round(j0, 2), "jt_ms_per_task": round(jt, 2),
                      "p_us_per_word": round(p * 1000, 4),
                      "commit_ms": {s: {"c0": round(a, 1), "ck_us_per_key": round(b * 1000, 3)}
                                    for s, (a, b) in fits.items()}}))
    for r in tput:
        s, n, w, k = str(r["shards"]), r["executors"], r["words_per_batch"], r["keys_per_batch"]
        a, b = fits[s]
        job = j0 + jt * n
        commit_ms, process_ms = a + b * k, job + w * p / n
        period = max(commit_ms, process_ms / 3, job, (w * p + commit_ms) / 2)
        pred, meas = w / period * 1000, r["pipelined_words_per_sec"]
        print(json.dumps({"model": "check", "executors": n, "shards": r["shards"], "predicted_words_per_sec":
                          round(pred), "measured_words_per_sec": meas, "error_pct": round((pred - meas) / meas * 100, 1),
                          "commit_ms": round(commit_ms, 1), "process_ms": round(process_ms, 1)}))
    a1, b1 = fits.get("1", fits[min(fits)])
    w, k = 500_000, 34_000                          # the reference batch: 50,000 sentences
    for s in (1, 3, 8, 16):
        curve = {}
        for n in (1, 2, 4, 8, 16, 32, 64):
            job = j0 + jt * n
            period = max(a1 + b1 * k / s, (job + w * p / n) / 3, job)
            curve[n] = round(w / period * 1000)
        print(json.dumps({"model": "curve", "shards": s, "words_per_batch": w, "keys_per_batch": k,
                          "words_per_sec_by_executors": curve}))


if __name__ == "__main__":
    main()
