#!/usr/bin/env python3
"""How much does the harness add to the pytest runs it grades?

Times `pdl-swe calibrate` on the bundled suite against the very same pytest
commands run bare (no harness, no sandbox) on the same prepared trees, at the
same parallelism, alternating the two, and reports the ratio of medians. Then it
breaks the bare run down: interpreter start-up, pytest import, and the effect of
cached bytecode on the tasks' own modules.

    python3 bench/calibrate_overhead.py [--binary target/release/pdl-swe] [-j 2] [--rounds 3]

The prepared trees and the exact commands come from `calibrate --keep-workdirs`:
every grading folder keeps `run/command.json` (program, arguments, working
directory, environment) next to its tree.
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


def load_commands(work_dir):
    """The kept commands in the order calibrate started them (the grading
    folders end in a start counter), so both sides schedule alike."""
    commands = []
    names = [n for n in os.listdir(work_dir) if n.rsplit("-", 1)[-1].isdigit()]
    for name in sorted(names, key=lambda n: int(n.rsplit("-", 1)[-1])):
        spec = os.path.join(work_dir, name, "run", "command.json")
        if os.path.exists(spec):
            with open(spec) as f:
                commands.append(json.load(f))
    return commands


def prepare(cmd, scratch):
    """The command's environment, with an empty private HOME and TMPDIR, as the
    harness gives every grading (a leftover pytest temp folder would make pytest
    spend time cleaning it up)."""
    env = dict(cmd["env"])
    run_dir = os.path.dirname(env["PDL_OUTCOMES_FILE"])
    for sub in ("home", "tmp"):
        shutil.rmtree(os.path.join(run_dir, sub), ignore_errors=True)
        os.makedirs(os.path.join(run_dir, sub))
    env["HOME"] = os.path.join(run_dir, "home")
    env["TMPDIR"] = os.path.join(run_dir, "tmp")
    open(env["PDL_OUTCOMES_FILE"], "w").close()
    return env


def run_bare(commands, jobs, write_bytecode=False):
    def one(cmd):
        env = prepare(cmd, None)
        if write_bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([cmd["program"], *cmd["args"]], cwd=cmd["cwd"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, commands))
    return time.perf_counter() - started


def time_snippet(python, code, runs=20):
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([python, "-c", code], check=True, env={"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"})
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="target/release/pdl-swe")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    if not os.path.exists(binary):
        sys.exit(f"{binary} does not exist: run `cargo build --release` first")

    scratch = tempfile.mkdtemp(prefix="pdl-bench-")
    try:
        kept = os.path.join(scratch, "kept")
        # Warm-up: builds the Python environments and prepares the trees.
        run_calibrate(binary, args.jobs, kept, keep=True)
        commands = load_commands(kept)
        gradings = len(commands)
        harness, harness_plain, bare = [], [], []
        for r in range(args.rounds):
            work = os.path.join(scratch, f"round{r}")
            harness.append(run_calibrate(binary, args.jobs, work))
            shutil.rmtree(work, ignore_errors=True)
            work = os.path.join(scratch, f"plain{r}")
            harness_plain.append(run_calibrate(binary, args.jobs, work, sandbox="none"))
            shutil.rmtree(work, ignore_errors=True)
            bare.append(run_bare(commands, args.jobs))
        with_bytecode = run_bare(commands, args.jobs, write_bytecode=True)  # writes caches
        with_bytecode = run_bare(commands, args.jobs, write_bytecode=True)  # uses them
        python = commands[0]["program"]
        startup_ms = time_snippet(python, "pass")
        import_ms = time_snippet(python, "import pytest")
        result = {
            "gradings": gradings,
            "jobs": args.jobs,
            "rounds": args.rounds,
            "calibrate_s": statistics.median(harness),
            "calibrate_no_sandbox_s": statistics.median(harness_plain),
            "bare_pytest_s": statistics.median(bare),
            "ratio": statistics.median(harness) / statistics.median(bare),
            "ratio_no_sandbox": statistics.median(harness_plain) / statistics.median(bare),
            "bare_pytest_with_bytecode_cache_s": with_bytecode,
            "python_startup_ms": startup_ms,
            "pytest_import_ms": import_ms,
            "samples": {"calibrate": harness, "calibrate_no_sandbox": harness_plain, "bare": bare},
        }
        print(json.dumps(result, indent=2))
        print(
            f"\n{gradings} gradings at -j {args.jobs}: calibrate {result['calibrate_s']:.2f} s "
            f"(no sandbox {result['calibrate_no_sandbox_s']:.2f} s), bare pytest {result['bare_pytest_s']:.2f} s, "
            f"ratio {result['ratio']:.3f} (no sandbox {result['ratio_no_sandbox']:.3f}); "
            f"python start-up {startup_ms:.0f} ms, pytest import {import_ms:.0f} ms per run",
            file=sys.stderr,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
