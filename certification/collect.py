#!/usr/bin/env python3
"""Turn solvers' finished agent-view folders into predictions files.

Each SOLVE_DIR is one attempt: a copy of one task's agent view
(`pdl-swe tasks export --agent-view`) that a solver worked in. Its answer is
the diff of `repo/` against the view's first commit, untracked files included
(but not caches). For every attempt this writes the diff to
`BATCH/diffs/<instance_id>/<attempt>.diff` and a predictions file
`BATCH/predictions/<attempt>.jsonl` of one line, named by `--agent` (the
certificate's agent). One file per attempt, because a predictions file holds
one prediction per instance and model: several attempts of one agent on one
task are graded one file at a time into the same results file
(`certification/grade.py`), and `pdl-swe certify` counts them as that agent's
attempts.

    python3 certification/collect.py --agent independent-solver-v1 \
        --batch certification/batches/b1 solvers/a01 solvers/a02
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

# Files a solver's tools leave behind that are never part of an answer.
IGNORED = [":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc",
           ":(exclude,glob)**/.pytest_cache/**", ":(exclude,glob).venv/**"]


def git(repo, *args, env=None, capture=True):
    return subprocess.run(["git", "-C", repo, *args], check=True, env=env,
                          stdout=subprocess.PIPE if capture else None).stdout


def attempt_diff(repo):
    """The attempt's diff against the first commit, without touching the repo."""
    base = git(repo, "rev-list", "--max-parents=0", "HEAD").decode().split()[-1]
    with tempfile.TemporaryDirectory() as tmp:
        # A private index, so that staging untracked files leaves the solver's
        # repository exactly as it was.
        env = dict(os.environ, GIT_INDEX_FILE=os.path.join(tmp, "index"))
        git(repo, "read-tree", base, env=env)
        git(repo, "add", "-A", "--", ".", *IGNORED, env=env)
        return git(repo, "diff", "--cached", "--binary", "--no-color",
                   "--no-ext-diff", base, env=env).decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agent", required=True, help="model_name_or_path of every prediction")
    ap.add_argument("--batch", required=True, help="the batch folder")
    ap.add_argument("solve_dirs", nargs="+")
    args = ap.parse_args()
    for d in args.solve_dirs:
        attempt = os.path.basename(os.path.normpath(d))
        with open(os.path.join(d, "task.json")) as f:
            instance_id = json.load(f)["instance_id"]
        diff = attempt_diff(os.path.join(d, "repo"))
        target = os.path.join(args.batch, "diffs", instance_id)
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, f"{attempt}.diff"), "w") as f:
            f.write(diff)
        predictions = os.path.join(args.batch, "predictions")
        os.makedirs(predictions, exist_ok=True)
        with open(os.path.join(predictions, f"{attempt}.jsonl"), "w") as f:
            f.write(json.dumps({"instance_id": instance_id, "model_name_or_path": args.agent,
                                "model_patch": diff}) + "\n")
        print(f"{attempt}: {instance_id}: {len(diff.splitlines())} diff lines", file=sys.stderr)


if __name__ == "__main__":
    main()
