#!/usr/bin/env python3
"""Register a task's ladder from the partial solutions a batch of attempts reached.

`groups` lists the graded attempts of one task that scored below 1.0, grouped
by the hidden tests they passed (one group is one candidate rung), with the
tests each group fails:

    python3 certification/rungs.py groups --task tasks/pdl_open_x_099 \
        --results certification/batches/b2/results.jsonl \
        --diffs certification/batches/b2/diffs

`register` turns chosen attempts into rungs: each attempt's diff (from the
batch's diffs folder) is copied to `ladder/<name>.diff`, and the manifest's
`graded_ladder_rungs` and `ladder` lists (empty before) get the rung, its
reward as graded and its note. The spec is a JSON list of
`{"attempt": "b2-03", "name": "no_wal_replay", "note": "..."}`:

    python3 certification/rungs.py register --task tasks/pdl_open_x_099 \
        --results certification/batches/b2/results.jsonl \
        --diffs certification/batches/b2/diffs --spec rungs.json

A ladder registered from an earlier batch is extended with `--append`.
`pdl-swe calibrate` then checks that every rung lands on its reward.
"""

import argparse
import hashlib
import json
import os
import sys

import yaml


def records(path, instance_id):
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("instance_id") == instance_id and r.get("kind") == "prediction":
                yield r


def attempts_by_digest(diffs, instance_id):
    """Attempt name by submission digest (the SHA-256 of the graded patch)."""
    folder = os.path.join(diffs, instance_id)
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".diff"):
            with open(os.path.join(folder, name), "rb") as f:
                out["sha256:" + hashlib.sha256(f.read()).hexdigest()] = name[:-5]
    return out


def attempt_of(record, by_digest):
    return by_digest.get(record["provenance"]["submission_digest"], "?")


def load_manifest(task):
    with open(os.path.join(task, "manifest.yaml")) as f:
        return yaml.safe_load(f)


def hidden_passed(record, hidden):
    return frozenset(t for t in hidden if record["tests"].get(t) == "passed")


def groups(args):
    m = load_manifest(args.task)
    hidden = m["FAIL_TO_PASS"]
    by_digest = attempts_by_digest(args.diffs, m["instance_id"])
    seen = {}
    for r in records(args.results, m["instance_id"]):
        if r["verdict"] != "graded" or r["reward"] >= 1.0:
            print(f"{attempt_of(r, by_digest)}: {r['verdict']} {r['reward']:.4f} (not a rung)")
            continue
        seen.setdefault((hidden_passed(r, hidden), round(r["reward"], 9)), []).append(r)
    for (passed, reward), rs in sorted(seen.items(), key=lambda kv: -kv[0][1]):
        names = ", ".join(attempt_of(r, by_digest) for r in rs)
        print(f"\nreward {reward:.4f}, {len(passed)}/{len(hidden)} hidden passed: {names}")
        for t in hidden:
            if t not in passed:
                print(f"  fails {t.split('::')[-1]}")


def replace_top_level(path, text, key, new):
    """`text` with the block of top-level `key` (its line and the indented or
    listed lines under it) replaced by `new`; the rest of the manifest keeps its
    layout, which a YAML round trip would not."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(key + ":")]
    if len(starts) != 1:
        sys.exit(f"{path}: expected one top-level `{key}:`")
    end = starts[0] + 1
    while end < len(lines) and lines[end][:1] in (" ", "-"):
        end += 1
    return "".join(lines[: starts[0]]) + new + "".join(lines[end:])


def register(args):
    m = load_manifest(args.task)
    existing = m.get("ladder") or []
    if (existing or m.get("graded_ladder_rungs")) and not args.append:
        sys.exit(f"{args.task}/manifest.yaml: the ladder is not empty; pass --append to add rungs "
                 "from another batch")
    taken = {r["name"] for r in existing}
    with open(args.spec) as f:
        spec = json.load(f)
    by_digest = attempts_by_digest(args.diffs, m["instance_id"])
    by_attempt = {attempt_of(r, by_digest): r for r in records(args.results, m["instance_id"])}
    ladder = []
    os.makedirs(os.path.join(args.task, "ladder"), exist_ok=True)
    for entry in spec:
        r = by_attempt.get(entry["attempt"])
        if r is None:
            sys.exit(f"{args.spec}: attempt {entry['attempt']} has no record in {args.results}")
        if r["verdict"] != "graded" or r["reward"] >= 1.0:
            sys.exit(f"{args.spec}: attempt {entry['attempt']} scored {r['reward']} ({r['verdict']}): not a rung")
        name = entry["name"] if entry["name"].endswith(".diff") else entry["name"] + ".diff"
        if name in taken:
            sys.exit(f"{args.spec}: a rung named {name} is already registered")
        src = os.path.join(args.diffs, m["instance_id"], entry["attempt"] + ".diff")
        with open(src) as f:
            diff = f.read()
        with open(os.path.join(args.task, "ladder", name), "x") as f:
            f.write(diff)
        ladder.append({"name": name, "reward": r["reward"],
                       "note": f"{entry['note']} (attempt {entry['attempt']})"})
    path = os.path.join(args.task, "manifest.yaml")
    with open(path) as f:
        text = f.read()
    whole = existing + ladder
    rendered = yaml.safe_dump({"ladder": whole}, sort_keys=False, width=120, allow_unicode=True)
    names = yaml.safe_dump({"graded_ladder_rungs": [l["name"] for l in whole]}, sort_keys=False)
    text = replace_top_level(path, text, "graded_ladder_rungs", names)
    text = replace_top_level(path, text, "ladder", rendered)
    with open(path, "w") as f:
        f.write(text)
    for l in ladder:
        print(f"{l['name']}: {l['reward']:.6f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("groups")
    g.add_argument("--task", required=True)
    g.add_argument("--results", required=True)
    g.add_argument("--diffs", required=True)
    r = sub.add_parser("register")
    for a in ("--task", "--results", "--diffs", "--spec"):
        r.add_argument(a, required=True)
    r.add_argument("--append", action="store_true",
                   help="add to a ladder registered from an earlier batch")
    args = ap.parse_args()
    {"groups": groups, "register": register}[args.cmd](args)


if __name__ == "__main__":
    main()
