#!/usr/bin/env python3
"""Grade every attempt of a batch into its results file.

Grades `BATCH/predictions/*.jsonl` one file at a time, in name order, into
`BATCH/results.jsonl` (an attempt already graded there is skipped by
`pdl-swe grade`'s resume rule, so an interrupted batch resumes).

    python3 certification/grade.py --binary target/release/pdl-swe \
        --dataset tasks certification/batches/b1
"""

import argparse
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default="target/release/pdl-swe")
    ap.add_argument("--dataset", required=True, help="the tasks the batch is graded against")
    ap.add_argument("batch")
    args = ap.parse_args()
    folder = os.path.join(args.batch, "predictions")
    out = os.path.join(args.batch, "results.jsonl")
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".jsonl"):
            continue
        done = subprocess.run([args.binary, "grade", "--dataset", args.dataset,
                               "--predictions", os.path.join(folder, name), "--out", out],
                              stdout=subprocess.DEVNULL)
        if done.returncode not in (0, 1):
            sys.exit(f"{name}: pdl-swe grade exited with {done.returncode}")
        print(f"{name}: graded", file=sys.stderr)


if __name__ == "__main__":
    main()
