"""The scale model of docs/performance.md ("Scale model"): fit per-batch costs from
``benchmarks/staged_commit.py``'s JSON lines, check the predicted words/s at every measured
point, and print the predicted curve to 64 executors.

    python benchmarks/staged_commit.py --part commit > commit.jsonl
    python benchmarks/staged_commit.py --part throughput --executors 1 > tp1.jsonl
    python benchmarks/staged_commit.py --part throughput --executors 2 > tp2.jsonl
    python benchmarks/scale_model.py commit.jsonl tp1.jsonl tp2.jsonl

Model, for a batch of W words and K distinct keys, N executor cores, S shards, M = 3
batches in flight (all times per batch, ms):

    job(N)     = j0 + jt * N                      a Spark job's fixed cost (its tasks' launch)
    process    = job(N) + (W * p + K * s(S)) / N  the processing job: count, stage
    commit     = c0(S) + K * ck(S)                the apply on S shards at once, and the record
    period     = max(commit, commit + K * s(S), process / M, process - job, job, cpu)

``commit + K * s(S)``: each shard runs the commit's script and the next batches' staging
in its one thread.
    words/s    = W / period

``cpu`` = kappa * (W * p + K * s(S) + commit + job) / cores: on this machine (cores = 2)
the executors, the shards, the JVM and the driver share two cores; ``kappa`` (the share of
other work: Python workers' and the JVM's own overhead, other users) is fitted on the
1-executor points and checked on the 2-executor points. On a cluster whose executors and
shards have cores of their own the cpu term does not bind and ck(S) = ck(1) / S.
The check at the measured points uses each point's own costs measured alone (one txid in
flight: ``alone_*``), so it tests the composition, not the fits.
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


def terms(commit: float, process: float, job: float, work: float, kappa: float, stage: float,
          cores: float = 2.0) -> dict[str, float]:
    """The model's lower bounds on the time per batch (ms), module docstring; ``work`` is
    the executors' CPU a batch (W·p + K·s), whatever N."""
    return {"commit": commit, "shards": commit + stage, "latency": process / 3, "executors": process - job,
            "job": job, "cpu": kappa * (work + commit + job) / cores}


def main() -> None:
    rows = lines(sys.argv[1:])
    commit = [r for r in rows if r.get("part") == "commit" and r["path"] == "staged" and r["tasks"] == 2]
    tput = [r for r in rows if r.get("part") == "throughput"]
    floors = [(r["tasks"], r["job_floor_ms"]) for r in rows if r.get("part") == "commit"]
    floors += [(r["executors"], r["job_floor_ms"]) for r in tput]
    j0, jt = fit_line([t for t, _ in floors], [f for _, f in floors])
    jt = max(jt, 0.0)
    fits = {}
    for s in sorted({str(r["shards"]) for r in commit}):
        pts = [r for r in commit if str(r["shards"]) == s]
        fits[s] = fit_line([r["keys_per_batch"] for r in pts], [r["commit_p50_ms"] for r in pts])
    one = [r for r in tput if r["executors"] == 1]
    base = [r for r in one if str(r["shards"]) == "1-server"][0]
    p = (base["alone_processing_p50_ms"] - base["job_floor_ms"]) / base["words_per_batch"]
    stage = {str(r["shards"]): max(0.0, (r["alone_processing_p50_ms"] - r["job_floor_ms"]
                                         - p * r["words_per_batch"]) / r["keys_per_batch"]) for r in one}
    # kappa: the least-squares ratio that makes the 1-executor points' cpu term match
    ks = []
    for r in one:
        c, pr, j = r["alone_commit_p50_ms"], r["alone_processing_p50_ms"], r["job_floor_ms"]
        meas = r["words_per_batch"] / r["pipelined_words_per_sec"] * 1000
        ks.append(meas / (p * r["words_per_batch"] + stage[str(r["shards"])] * r["keys_per_batch"] + c + j) * 2)
    kappa = sorted(ks)[len(ks) // 2]
    print(json.dumps({"model": "fit", "j0_ms": round(j0, 2), "jt_ms_per_task": round(jt, 2),
                      "p_us_per_word": round(p * 1000, 4), "kappa": round(kappa, 3),
                      "stage_us_per_key": {s: round(v * 1000, 2) for s, v in stage.items()},
                      "commit": {s: {"c0_ms": round(a, 1), "ck_us_per_key": round(b * 1000, 2)}
                                 for s, (a, b) in fits.items()}}))
    for r in tput:
        c, pr, j, n = r["alone_commit_p50_ms"], r["alone_processing_p50_ms"], r["job_floor_ms"], r["executors"]
        st = stage[str(r["shards"])] * r["keys_per_batch"]
        t = terms(c, pr, j, p * r["words_per_batch"] + st, kappa, st)
        per = max(t.values())
        pred, meas = r["words_per_batch"] / per * 1000, r["pipelined_words_per_sec"]
        print(json.dumps({"model": "check", "executors": n, "shards": r["shards"], "fitted_on": n == 1,
                          "predicted_words_per_sec": round(pred), "measured_words_per_sec": meas,
                          "error_pct": round((pred - meas) / meas * 100, 1), "commit_ms": c, "process_ms": pr,
                          "bound": max(t, key=lambda x: t[x])}))
    a1, b1 = fits["1"]
    w, k = 500_000, 34_000                          # the reference batch: 50,000 sentences
    for layout, (a, b) in (("one redis-server", fits["1-server"]),):
        job = [j0 + jt * n for n in (1, 2, 4, 8, 16, 32, 64)]
        print(json.dumps({"model": "curve", "shards": layout, "words_per_batch": w, "keys_per_batch": k,
                          "words_per_sec_by_executors": {n: round(w / max(a + b * k, (jb + w * p / n) / 3,
                                                                            w * p / n, jb) * 1000)
                                                         for n, jb in zip((1, 2, 4, 8, 16, 32, 64), job,
                                                                          strict=True)}}))
    for s in (1, 3, 8, 16, 32):
        curve = {}
        for n in (1, 2, 4, 8, 16, 32, 64):
            job = j0 + jt * n
            process = job + (w * p + k * stage.get("3", 0.0)) / n
            per = max(a1 + b1 * k / s + k * stage.get("3", 0.0) / s, process / 3, process - job, job)
            curve[n] = round(w / per * 1000)
        print(json.dumps({"model": "curve", "shards": s, "words_per_batch": w, "keys_per_batch": k,
                          "words_per_sec_by_executors": curve}))


if __name__ == "__main__":
    main()
