#!/usr/bin/env python3
"""Metered attempts (folders written by console_episode.py) → one batch folder.

    python3 certification/collect_episodes.py --batch certification/batches/<batch> \\
        EPISODE_DIR...

For each episode folder (its `run/` campaign folder and its `mailbox/`), the
batch gets, under the attempt's name (the folder's name):

    results.jsonl                          the episode records, as graded by the campaign
    diffs/<instance_id>/<attempt>.diff     the final workspace's diff (what was graded)
    conversations/<instance_id>/<attempt>.jsonl.gz
                                           every request the solver saw (its new messages)
                                           and every reply it wrote, in order

`pdl-swe certify certification/batches/<batch>/results.jsonl` certifies them:
their records carry the token budget they were metered against.
"""

import argparse
import gzip
import json
import os
import sys


def identity(record):
    """What makes an episode record one attempt: the whole record. The
    episode's `key` names its job (task, agent, model, sample) and is the same
    for every attempt of one configuration, so it cannot tell them apart."""
    return json.dumps(record, sort_keys=True)


def conversation(mailbox):
    requests = os.path.join(mailbox, "requests")
    replies = os.path.join(mailbox, "replies")
    lines = []
    for name in sorted(os.listdir(requests)):
        if not name.endswith(".json") or name.startswith("."):
            continue
        seq = name[:-5]
        with open(os.path.join(requests, name)) as f:
            entry = {"seq": int(seq), "request": json.load(f)}
        reply = os.path.join(replies, name)
        if os.path.exists(reply):
            with open(reply) as f:
                entry["reply"] = json.load(f)
        rejected = os.path.join(replies, seq + ".rejected")
        if os.path.exists(rejected):
            with open(rejected) as f:
                entry["rejected_reply"] = f.read()
        if os.path.exists(os.path.join(requests, seq + ".abandoned")):
            entry["abandoned"] = True
        lines.append(json.dumps(entry, sort_keys=True))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", required=True)
    ap.add_argument("episodes", nargs="+")
    args = ap.parse_args()
    os.makedirs(args.batch, exist_ok=True)
    results_path = os.path.join(args.batch, "results.jsonl")
    seen = set()
    if os.path.exists(results_path):
        with open(results_path) as f:
            seen = {identity(json.loads(l)) for l in f if l.strip()}
    # Every folder is read before anything is written, so a wrong argument (a
    # log file, an episode still running) leaves the batch as it was.
    planned = []
    for folder in args.episodes:
        results = os.path.join(folder, "run", "results.jsonl")
        if not os.path.isfile(results):
            sys.exit(f"{folder}: not an episode folder (no run/results.jsonl); nothing was added")
        with open(results) as f:
            records = [json.loads(l) for l in f if l.strip()]
        episodes = [r for r in records if r.get("kind") == "episode"]
        if len(episodes) != 1:
            sys.exit(f"{folder}: expected one episode record, found {len(episodes)}; nothing was added")
        planned.append((folder, episodes[0]))
    added = 0
    with open(results_path, "a") as out:
        for folder, record in planned:
            attempt = os.path.basename(os.path.normpath(folder))
            run = os.path.join(folder, "run")
            instance = record["instance_id"]
            if identity(record) in seen:
                print(f"{attempt}: already in the batch; skipped")
                continue
            diff_dir = os.path.join(args.batch, "diffs", instance)
            os.makedirs(diff_dir, exist_ok=True)
            with open(os.path.join(run, record["episode"]["patch"]), "rb") as f:
                patch = f.read()
            with open(os.path.join(diff_dir, attempt + ".diff"), "wb") as f:
                f.write(patch)
            conv_dir = os.path.join(args.batch, "conversations", instance)
            os.makedirs(conv_dir, exist_ok=True)
            with gzip.open(os.path.join(conv_dir, attempt + ".jsonl.gz"), "wt", compresslevel=9) as f:
                f.write(conversation(os.path.join(folder, "mailbox")))
            out.write(json.dumps(record, sort_keys=True) + "\n")
            added += 1
            print(f"{attempt}: {instance} reward {record['reward']:.3f} "
                  f"({record['episode']['end_reason']}, {record['episode']['steps']} steps)")
    print(f"{added} attempts added to {args.batch}")


if __name__ == "__main__":
    main()
