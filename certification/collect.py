#!/usr/bin/env python3
"""Turn solvers' finished agent-view folders into a predictions file.

Each SOLVE_DIR is one attempt: a copy of one task's agent view
(`pdl-swe tasks export --agent-view`) that a solver worked in. Its answer is
the diff of `repo/` against the view's first commit, untracked files included
(but not caches). For every attempt this writes the diff to
`DIFFS/<instance_id>/<attempt>.diff` and one prediction line to `--out`,
named by `--agent` (the certificate's agent), in the order given.

    python3 certification/collect.py --agent independent-solver-v1 \
        --out certification/batches/b1/predictions.jsonl \
        --diffs certification/batches/b1/diffs /work/solve/a01 /work/solve/a02
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
    ap.add_argument("--out", required=True, help="predictions JSONL to write")
    ap.add_argument("--diffs", required=True, help="folder for the attempts' diffs")
    ap.add_argument("solve_dirs", nargs="+")
    args = ap.parse_args()
    lines = []
    for d in args.solve_dirs:
        attempt = os.path.basename(os.path.normpath(d))
        with open(os.path.join(d, "task.json")) as f:
            instance_id = json.load(f)["instance_id"]
        diff = attempt_diff(os.path.join(d, "repo"))
        target = os.path.join(args.diffs, instance_id)
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, f"{attempt}.diff"), "w") as f:
            f.write(diff)
        lines.append({"instance_id": instance_id, "model_name_or_path": args.agent,
                      "model_patch": diff})
        print(f"{attempt}: {instance_id}: {len(diff.splitlines())} diff lines", file=sys.stderr)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
