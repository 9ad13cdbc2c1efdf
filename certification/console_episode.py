#!/usr/bin/env python3
"""Runs one metered episode whose model is the console model.

The built-in agent, the sandbox and the metering gateway are the real ones;
every model reply is written by a solver through the mailbox folder with
`pdl-swe model turn` and `pdl-swe model reply`. The episode is held to the
task's own token budget, so its record certifies under the card's contract.

    python3 certification/console_episode.py --task pdl_open_mvcc_snapshot_018 \\
        --out eps/018-a --model independent-solver-v2

writes eps/018-a/run (the campaign's run folder: results.jsonl, trajectory,
patch) and eps/018-a/mailbox (what the solver reads and writes); it returns
when the episode ends and writes `mailbox/closed`.
"""

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="target/release/pdl-swe")
    ap.add_argument("--dataset", default="tasks")
    ap.add_argument("--task", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--model", required=True, help="the solver's name, as certificates show it")
    ap.add_argument("--episode-timeout", type=float, default=4 * 3600)
    args = ap.parse_args()

    out = args.out.resolve()
    mailbox = out / "mailbox"
    mailbox.mkdir(parents=True, exist_ok=True)
    (mailbox / "closed").unlink(missing_ok=True)
    port = free_port()
    console_log = open(out / "console.log", "ab")
    console = subprocess.Popen(
        [args.binary, "model", "console", "--mailbox", str(mailbox), "--listen", f"127.0.0.1:{port}"],
        stdout=console_log, stderr=subprocess.STDOUT,
    )
    time.sleep(0.5)
    if console.poll() is not None:
        print(f"the console model did not start; see {out / 'console.log'}", file=sys.stderr)
        return 3
    run_log = open(out / "run.log", "ab")
    try:
        run = subprocess.run(
            [args.binary, "run", "--agent", "builtin", "--model", args.model,
             "--base-url", f"http://127.0.0.1:{port}/v1",
             "--dataset", args.dataset, "--task", args.task, "--out", str(out / "run"),
             "--max-steps", "1000", "--episode-timeout", str(args.episode_timeout),
             "--upstream-timeout", str(args.episode_timeout), "--format", "json"],
            stdout=run_log, stderr=subprocess.STDOUT,
        )
        why = f"`pdl-swe run` exited {run.returncode}; the workspace has been graded"
    finally:
        (mailbox / "closed").write_text(why if "why" in locals() else "the episode was stopped")
        console.terminate()
        console.wait()
    print(why)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
