#!/usr/bin/env python3
"""Is `pdl-swe grade` at least as fast as a naive Python harness?

The naive harness is what a benchmark author writes in an afternoon: for each
prediction, write the task's files to a fresh folder, `git apply` the hidden
tests and the prediction's patch, run pytest over the task's FAIL_TO_PASS and
PASS_TO_PASS node IDs with `--junitxml`, and read the XML. No sandbox, no
policy, no checks. Both sides grade the same predictions (every task's gold
patch, every rung and an empty patch: 81 predictions on the bundled suite) with
the same Python environments at the same parallelism, alternating, and the
script reports the ratio of medians.

    python3 bench/grade_vs_naive.py [--binary target/release/pdl-swe] [-j 2] [--rounds 5]
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
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor


def export_suite(binary, folder):
    path = os.path.join(folder, "suite.jsonl")
    subprocess.run([binary, "tasks", "export", "--to", path], check=True, capture_output=True)
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def predictions(rows, folder):
    """Gold, every rung and an empty patch for every task."""
    preds = []
    for row in rows:
        preds.append({"instance_id": row["instance_id"], "model_name_or_path": "gold", "model_patch": row["patch"]})
        for rung in (row.get("pdl_extras") or {}).get("ladder") or []:
            preds.append({"instance_id": row["instance_id"], "model_name_or_path": rung["name"], "model_patch": rung["diff"]})
        preds.append({"instance_id": row["instance_id"], "model_name_or_path": "empty", "model_patch": ""})
    path = os.path.join(folder, "predictions.jsonl")
    with open(path, "w") as f:
        for p in preds:
            f.write(json.dumps(p) + "\n")
    return preds, path


def interpreters(binary, folder):
    """Each task's environment, as the harness built it: from one kept grading
    per task (`out/hidden/command.json`)."""
    work = os.path.join(folder, "kept")
    os.makedirs(work)
    subprocess.run(
        [binary, "calibrate", "-j", "2", "--format", "json", "--work-dir", work, "--keep-workdirs"],
        check=True,
        capture_output=True,
    )
    found = {}
    for name in os.listdir(work):
        spec = os.path.join(work, name, "out", "hidden", "command.json")
        if os.path.exists(spec):
            with open(spec) as f:
                cmd = json.load(f)
            task = name.split("-")[0]
            found[task] = (cmd["python"], cmd["env"])
    shutil.rmtree(work, ignore_errors=True)
    return found


def git_apply(tree, patch_text, scratch):
    if not patch_text.strip():
        return True
    patch = os.path.join(scratch, "p.diff")
    with open(patch, "w") as f:
        f.write(patch_text if patch_text.endswith("\n") else patch_text + "\n")
    return subprocess.run(["git", "apply", "--whitespace=nowarn", patch], cwd=tree, capture_output=True).returncode == 0


def naive_grade(row, pred, python, env, root):
    """One prediction, the naive way; returns the passed fraction of hidden tests."""
    scratch = tempfile.mkdtemp(dir=root)
    tree = os.path.join(scratch, "tree")
    for f in row["files"]:
        path = os.path.join(tree, f["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as out:
            out.write(f["content"])
    if not git_apply(tree, row["test_patch"], scratch) or not git_apply(tree, pred["model_patch"], scratch):
        return 0.0
    ids = row["FAIL_TO_PASS"] + row["PASS_TO_PASS"]
    junit = os.path.join(scratch, "junit.xml")
    home = os.path.join(scratch, "home")
    os.makedirs(home)
    subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", junit, "--", *ids],
        cwd=tree,
        env=dict(env, HOME=home, TMPDIR=home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    passed = 0
    if os.path.exists(junit):
        for case in ET.parse(junit).getroot().iter("testcase"):
            if not any(child.tag in ("failure", "error", "skipped") for child in case):
                passed += 1
    return passed / max(1, len(ids))


def run_naive(rows, preds, envs, jobs):
    by_id = {r["instance_id"]: r for r in rows}
    root = tempfile.mkdtemp(prefix="pdl-bench-naive-")
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(
            pool.map(
                lambda p: naive_grade(by_id[p["instance_id"]], p, *envs[by_id[p["instance_id"]]["task_id"]], root),
                preds,
            )
        )
    elapsed = time.perf_counter() - started
    shutil.rmtree(root, ignore_errors=True)
    return elapsed


def run_grade(binary, predictions_path, jobs, folder):
    out = os.path.join(folder, "grade-%d.jsonl" % time.monotonic_ns())
    started = time.perf_counter()
    done = subprocess.run(
        [binary, "grade", "--predictions", predictions_path, "-j", str(jobs), "--out", out, "--format", "json"],
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"grade failed ({done.returncode}):\n{done.stderr[-2000:]}")
    with open(out) as f:
        records = [json.loads(line) for line in f if line.strip()]
    os.remove(out)
    return elapsed, records


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="target/release/pdl-swe")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="pdl-bench-grade-")
    rows = export_suite(args.binary, folder)
    preds, preds_path = predictions(rows, folder)
    envs = interpreters(args.binary, folder)
    print(f"{len(preds)} predictions over {len(rows)} tasks", file=sys.stderr)
    samples = {"pdl-swe grade": [], "naive harness": []}
    graded = 0
    for i in range(args.rounds):
        elapsed, records = run_grade(args.binary, preds_path, args.j, folder)
        samples["pdl-swe grade"].append(elapsed)
        graded = sum(1 for r in records if r["verdict"] in ("graded", "policy_violation", "patch_failed"))
        samples["naive harness"].append(run_naive(rows, preds, envs, args.j))
        print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in samples.items()), file=sys.stderr)
    shutil.rmtree(folder, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(
        json.dumps(
            {
                "predictions": len(preds),
                "graded_records": graded,
                "jobs": args.j,
                "rounds": args.rounds,
                "median_s": med,
                "samples_s": samples,
                "ratio": med["pdl-swe grade"] / med["naive harness"],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
