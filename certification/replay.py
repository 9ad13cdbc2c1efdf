#!/usr/bin/env python3
"""Replay a batch's attempts against another version of their tasks.

Every attempt's diff in `FROM/diffs/<task_id>-v<N>/` becomes a prediction for
the task's current instance in the dataset, written to `TO/predictions/` (one
file per attempt, `model_name_or_path` = the attempt's name) with its diff in
`TO/diffs/<instance_id>/`. `certification/grade.py --dataset tasks TO` then
grades them, and `certification/rungs.py` registers rungs from what they reach:

    python3 certification/replay.py --dataset tasks \\
        --from certification/batches/metered-a-v2 --to certification/batches/metered-a-on-v3
"""

import argparse
import json
import os
import sys

import yaml


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, help="a task-tree folder")
    ap.add_argument("--from", dest="source", required=True)
    ap.add_argument("--to", dest="target", required=True)
    ap.add_argument("--task", action="append", default=[], help="only these task IDs")
    args = ap.parse_args()
    current = {}
    for task_id in sorted(os.listdir(args.dataset)):
        path = os.path.join(args.dataset, task_id, "manifest.yaml")
        if os.path.isfile(path):
            with open(path) as f:
                current[task_id] = yaml.safe_load(f)["instance_id"]
    os.makedirs(os.path.join(args.target, "predictions"), exist_ok=True)
    count = 0
    for instance in sorted(os.listdir(os.path.join(args.source, "diffs"))):
        task_id = instance.rsplit("-v", 1)[0]
        if args.task and task_id not in args.task:
            continue
        if task_id not in current:
            sys.exit(f"{instance}: no task {task_id} in {args.dataset}")
        target_instance = current[task_id]
        out_diffs = os.path.join(args.target, "diffs", target_instance)
        os.makedirs(out_diffs, exist_ok=True)
        folder = os.path.join(args.source, "diffs", instance)
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".diff"):
                continue
            attempt = name[:-5]
            with open(os.path.join(folder, name)) as f:
                diff = f.read()
            with open(os.path.join(out_diffs, name), "w") as f:
                f.write(diff)
            prediction = {"instance_id": target_instance, "model_name_or_path": attempt,
                          "model_patch": diff}
            with open(os.path.join(args.target, "predictions", attempt + ".jsonl"), "w") as f:
                f.write(json.dumps(prediction) + "\n")
            count += 1
    print(f"{count} attempts written to {args.target}")


if __name__ == "__main__":
    main()
