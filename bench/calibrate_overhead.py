#!/usr/bin/env python3
"""How much does the harness add to the pytest runs it grades?

Times `pdl-swe calibrate` on the bundled suite (every layer on: patch applied in
the sandbox, the tree read and policed, the graded tree written, the trusted
bootstrap with its signed channel and checks, the namespace sandbox with its
cgroup) against bare `python -m pytest` over the same node IDs on the same graded
trees, with no harness plugin and no sandbox, at the same parallelism,
alternating the sides, and reports the ratio of medians.

    python3 bench/calibrate_overhead.py [--binary target/release/pdl-swe] [-j 2] [--rounds 5]

The graded trees and the node IDs come from `calibrate --keep-workdirs`: every
grading folder keeps `graded/` (the tree pytest ran on) and, per test run,
`out/public/command.json` and `out/hidden/command.json` (the interpreter, the
environment and the node IDs).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor


def run_calibrate(binary, jobs, work_dir, sandbox="namespaces", keep=False):
    args = [binary, "calibrate", "-j", str(jobs), "--format", "json", "--work-dir", work_dir, "--sandbox", sandbox]
    if keep:
        args.append("--keep-workdirs")
    started = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"calibrate failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    report = json.loads(out.stdout)
    assert report["ok"], "the suite is not calibrated"
    return elapsed


def load_runs(work_dir):
    """The kept gradings: (python, graded tree, node IDs, environment). The
    harness runs a grading's public tests, then its hidden tests, each with a
    command of its own (`out/public/`, `out/hidden/`); the bare side runs them
    all at once, as a plain user would."""
    runs = []
    for name in sorted(os.listdir(work_dir)):
        parts, python, env = [], None, None
        for part in ("public", "hidden"):
            spec = os.path.join(work_dir, name, "out", part, "command.json")
            if os.path.exists(spec):
                with open(spec) as f:
                    cmd = json.load(f)
                parts.append(cmd["node_ids"])
                python, env = cmd["python"], cmd["env"]
        if parts:
            runs.append((python, os.path.join(work_dir, name, "graded"), parts, env))
    return runs


def bare(run, scratch, options=(), split=False):
    """`python -m pytest` over the node IDs, with the harness's deterministic
    environment and an empty private HOME and TMPDIR, nothing else (and
    `options`, to compare like with like): once over all of them, or, with
    `split`, once per test run of the harness (public, then hidden)."""
    python, tree, parts, env = run
    groups = parts if split else [[i for part in parts for i in part]]
    for ids in groups:
        home = tempfile.mkdtemp(dir=scratch)
        subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, "--rootdir", tree, "--", *ids],
            cwd=tree,
            env=dict(env, HOME=home, TMPDIR=home),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def run_bare(runs, jobs, options=(), split=False):
    scratch = tempfile.mkdtemp(prefix="pdl-bench-bare-")
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(lambda r: bare(r, scratch, options, split), runs))
    elapsed = time.perf_counter() - started
    shutil.rmtree(scratch, ignore_errors=True)
    return elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="target/release/pdl-swe")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    kept = tempfile.mkdtemp(prefix="pdl-bench-kept-")
    run_calibrate(args.binary, args.j, kept, keep=True)
    runs = load_runs(kept)
    print(f"{len(runs)} gradings kept", file=sys.stderr)
    # pytest's defaults, as a user runs it; and with the one option the harness
    # sets that changes pytest's own work (no assertion rewriting: records
    # carry no assertion messages), which isolates what the harness adds.
    samples = {
        "calibrate": [],
        "calibrate --sandbox none": [],
        "bare pytest": [],
        "bare pytest --assert=plain": [],
        "bare pytest --assert=plain, public then hidden": [],
    }
    for i in range(args.rounds):
        work = tempfile.mkdtemp(prefix="pdl-bench-")
        samples["calibrate"].append(run_calibrate(args.binary, args.j, work))
        samples["calibrate --sandbox none"].append(run_calibrate(args.binary, args.j, work, sandbox="none"))
        samples["bare pytest"].append(run_bare(runs, args.j))
        samples["bare pytest --assert=plain"].append(run_bare(runs, args.j, ("--assert=plain",)))
        samples["bare pytest --assert=plain, public then hidden"].append(
            run_bare(runs, args.j, ("--assert=plain",), split=True)
        )
        shutil.rmtree(work, ignore_errors=True)
        print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in samples.items()), file=sys.stderr)
    shutil.rmtree(kept, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    result = {
        "gradings": len(runs),
        "jobs": args.j,
        "rounds": args.rounds,
        "median_s": med,
        "samples_s": samples,
        "ratio": med["calibrate"] / med["bare pytest"],
        "ratio_without_sandbox": med["calibrate --sandbox none"] / med["bare pytest"],
        "ratio_same_options": med["calibrate"] / med["bare pytest --assert=plain"],
        "ratio_same_runs": med["calibrate"] / med["bare pytest --assert=plain, public then hidden"],
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
