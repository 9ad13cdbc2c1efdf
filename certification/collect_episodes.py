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
            seen = {json.loads(l)["episode"]["key"] for l in f if l.strip()}
    added = 0
    with open(results_path, "a") as out:
        for folder in args.episodes:
            attempt = os.path.basename(os.path.normpath(folder))
            run = os.path.join(folder, "run")
            records = []
            with open(os.path.join(run, "results.jsonl")) as f:
                records = [json.loads(l) for l in f if l.strip()]
            episodes = [r for r in records if r.get("kind") == "episode"]
            if len(episodes) != 1:
                sys.exit(f"{folder}: expected one episode record, found {len(episodes)}")
            record = episodes[0]
            instance = record["instance_id"]
            if record["episode"]["key"] in seen:
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
