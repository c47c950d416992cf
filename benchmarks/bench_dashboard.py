"""What watching a study costs it: a 40-trial run's wall time with and without the dashboard.

The study is the README's example (`benchmarks.bench_studies`: the toy problem, the constraint
``search_seconds <= 30``, 2 workers, SQLite, the shipped tuner), driven in this process. Arms,
interleaved within each repetition in a shuffled order (the machine is shared: compare each arm
with the bare run of the same repetition):

    none        the study alone
    page        ``tuner dashboard`` serving the study (its own process) while a client polls it as
                the open page does: the views every 2 s (the full views when they changed), and
                optuna-dashboard's study detail every 10 s (its live-update interval)
    structure   as ``page``, with the Structure view open: the page asks for the learned structure
                every 5 s, and the server refits it in a background process (``nice 19``) as
                trials complete

Measured per run: the study's wall time and CPU seconds (the driver and its pool workers), and the
dashboard server's CPU seconds (its process and its background fits, from ``/proc``). Reported:
the paired ratio of each arm's wall time to the bare run's of the same repetition (geometric mean
over repetitions, with a t-interval on the log ratios), target under 1.05 for ``page``; and the
dashboard's CPU as a share of the study's, which a shared machine's load does not blur.

Usage:
    python -m benchmarks.bench_dashboard                 # 3 repetitions of 40 trials
    python -m benchmarks.bench_dashboard --reps 2        # what is stored (a shared machine)
    python -m benchmarks.bench_dashboard --reps 1 --trials 10 --name bench_dashboard_quick
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks._common import machine_info, round_floats, write_results

ROOT = Path(__file__).resolve().parents[1]
OBJ = {"latency": "minimize", "search_seconds": "minimize"}
ARMS = ("none", "page", "structure")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its waited-for children (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    ticks = sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    """CPU seconds of this process and of its children that ended (the study's pool workers)."""
    import resource

    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class _Client(threading.Thread):
    """Polls the dashboard as the open page does (module docstring), until stopped."""

    def __init__(self, base: str, name: str, structure: bool) -> None:
        super().__init__(daemon=True)
        self.base, self.name, self.structure = base, name, structure
        self.stop = threading.Event()
        self.requests = 0
        self.errors = 0

    def _get(self, path: str) -> Any:
        self.requests += 1
        try:
            with urllib.request.urlopen(self.base + path, timeout=60) as r:
                return json.loads(r.read())
        except Exception:  # noqa: BLE001 - counted; the server may still be starting
            self.errors += 1
            return {}

    def run(self) -> None:
        version, tick = -1, 0
        while not self.stop.wait(2.0 if tick else 0.0):
            got = self._get(f"/rt/study/{self.name}/api/views?since={version}")
            version = got.get("version", version)
            if tick % 5 == 0:
                self._get("/api/studies/1")
            if self.structure and tick % 2 == 0:  # every 4 s (the page: 5 s)
                self._get(f"/rt/study/{self.name}/api/structure")
            tick += 1


def _wait_up(base: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/rt/api/studies", timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the dashboard at {base} did not answer in {timeout:.0f} s")


def run_once(arm: str, trials: int, seed: int, folder: Path) -> dict[str, Any]:
    """One study of ``trials`` trials under ``arm``; its wall time and the dashboard's CPU."""
    from studies.examples import toy_evaluate, toy_space
    from studies.study import Study

    db = folder / f"{arm}-{seed}.db"
    url = f"sqlite:///{db}"
    name = "bench"
    study = Study(name, toy_space(), OBJ, toy_evaluate, ["search_seconds <= 30"], url, seed=seed)
    server = client = None
    if arm != "none":
        port = _free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rewrite_tuner.cli",
                "dashboard",
                name,
                "-s",
                url,
                "-p",
                str(port),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        _wait_up(base)
        client = _Client(base, name, structure=arm == "structure")
        client.start()
        time.sleep(3.0)  # the first views are built before the study starts
    cpu0 = _cpu_seconds(server.pid) if server else 0.0
    own0 = _own_cpu()
    t0 = time.perf_counter()
    try:
        study.optimize(trials, n_workers=2, progress=False)
    except BaseException:
        if server is not None:
            server.terminate()  # the server stops its structure fit too
            server.wait()
        raise
    wall = time.perf_counter() - t0
    out: dict[str, Any] = {
        "arm": arm,
        "seed": seed,
        "wall": wall,
        "study_cpu": _own_cpu() - own0,  # the driver and its (finished) pool workers
        "load": os.getloadavg()[0],
    }
    if server is not None and client is not None:
        out["dashboard_cpu"] = _cpu_seconds(server.pid) - cpu0
        client.stop.set()
        client.join()
        out["requests"], out["request_errors"] = client.requests, client.errors
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm: the paired wall-time ratios to ``none`` (same seed), their geometric mean and a
    95% t-interval on the mean log ratio; the dashboard's CPU seconds."""
    bare = {r["seed"]: r["wall"] for r in runs if r["arm"] == "none"}
    out: dict[str, Any] = {}
    for arm in ARMS[1:]:
        mine = [r for r in runs if r["arm"] == arm and r["seed"] in bare]
        logs = [math.log(r["wall"] / bare[r["seed"]]) for r in mine]
        if not logs:
            continue
        mean = statistics.fmean(logs)
        half = float("nan")
        if len(logs) > 1:
            from scipy.stats import t

            half = t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
        out[arm] = {
            "ratios": [math.exp(x) for x in logs],
            "ratio": math.exp(mean),
            "low": math.exp(mean - half),
            "high": math.exp(mean + half),
            "dashboard_cpu": [r.get("dashboard_cpu") for r in mine],
            # the dashboard's CPU as a share of the study's own (driver and workers)
            "cpu_share": [r.get("dashboard_cpu", 0.0) / r["study_cpu"] for r in mine],
            "wall": [r["wall"] for r in mine],
        }
    out["none"] = {"wall": [bare[s] for s in sorted(bare)]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--name", default="bench_dashboard")
    args = ap.parse_args()
    machine = machine_info()
    runs: list[dict[str, Any]] = []
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp:
        for rep in range(args.reps):
            order = list(args.arms)
            rng.shuffle(order)
            for arm in order:
                r = run_once(arm, args.trials, rep, Path(tmp))
                runs.append(r)
                print(json.dumps(round_floats(r, 4)), flush=True)
                payload = {
                    "settings": {"trials": args.trials, "reps": args.reps, "workers": 2,
                                 "study": "README toy study, SQLite"},
                    "runs": runs,
                    "summary": summarize(runs),
                }  # fmt: skip
                write_results(args.name, round_floats(payload), machine=machine)
    summary = summarize(runs)
    head = (
        f"{'arm':<10} {'wall s (per rep)':<24} {'wall ratio to none':<24} dashboard CPU s (share)"
    )
    print("\n" + head)
    print(f"{'none':<10} {', '.join(f'{w:.1f}' for w in summary['none']['wall']):<24}")
    for arm in ARMS[1:]:
        if arm in summary:
            s = summary[arm]
            walls = ", ".join(f"{w:.1f}" for w in s["wall"])
            ratio = f"{s['ratio']:.3f} [{s['low']:.3f}, {s['high']:.3f}]"
            cpu = ", ".join(
                f"{c:.1f} ({100 * f:.1f}%)" for c, f in zip(s["dashboard_cpu"], s["cpu_share"])
            )
            print(f"{arm:<10} {walls:<24} {ratio:<24} {cpu}")


if __name__ == "__main__":
    main()
