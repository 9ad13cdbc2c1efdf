#!/usr/bin/env python3
"""Write the certification table of docs/SUITE.md from the task trees.

For every task: its tier, the attempts its fresh certificates hold, the solve
rate, the mean hidden pass fraction, the rungs attempts landed on, the gate,
and the verdict of the fairness review kept in `tasks/<id>/reviews/`.
The table replaces the text between the markers
`<!-- certification:begin -->` and `<!-- certification:end -->`.

    python3 certification/suite_table.py --binary target/release/pdl-swe
"""

import argparse
import json
import os
import re
import subprocess

BEGIN, END = "<!-- certification:begin -->", "<!-- certification:end -->"


def review_verdict(task_dir):
    """The verdicts of every review in the task's `reviews/` folder, added up
    (a later version's review covers the tests that version added)."""
    folder = os.path.join(task_dir, "reviews")
    if not os.path.isdir(folder):
        return "-"
    implied = not_implied = 0
    resolutions = set()
    links = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            text = f.read()
        m = re.search(r"Summary:\s*(\d+) implied, (\d+) not implied", text)
        if not m:
            continue
        implied += int(m.group(1))
        not_implied += int(m.group(2))
        if "## Resolution" in text and m.group(2) != "0":
            resolution = text.split("## Resolution", 1)[1]
            resolutions.add("dropped" if "dropped" in resolution else "rewritten")
        label = "review" if name == "fairness.md" else name[:-3].replace("fairness-", "review ")
        links.append(f"[{label}](../tasks/{os.path.basename(task_dir)}/reviews/{name})")
    if not links:
        return "-"
    fixed = "".join(f", {r}" for r in sorted(resolutions, reverse=True))
    return f"{implied} implied, {not_implied} not implied{fixed} ({', '.join(links)})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default="target/release/pdl-swe")
    ap.add_argument("--tasks", default="tasks")
    ap.add_argument("--doc", default="docs/SUITE.md")
    args = ap.parse_args()
    out = subprocess.run([args.binary, "certify", "--check", "--dataset", args.tasks, "--json"],
                         stdout=subprocess.PIPE, check=False)
    summary = json.loads(out.stdout)
    rows = ["| task | tier | attempts | solved | mean hidden passed | landed rungs | gate | fairness review |",
            "|---|---|---|---|---|---|---|---|"]
    # Counted certificates only: in the metered tiers, unmetered ones are listed apart.
    for t in sorted(summary["tasks"], key=lambda t: t["task_id"][-3:]):
        rungs = ", ".join(f"`{r}` ×{n}" for r, n in sorted(t["landed_rungs"].items())) or "-"
        gate = t["gate"]["status"].replace("_", " ")
        if t["gate"].get("reason"):
            gate += f": {t['gate']['reason']}"
        mean = t.get("mean_hidden_pass")
        rows.append("| `{}` | {} | {} | {} | {} | {} | {} | {} |".format(
            t["instance_id"], t["tier"], t["attempts"],
            f"{t['solved']}/{t['attempts']}" if t["attempts"] else "-",
            f"{mean:.2f}" if mean is not None else "-", rungs, gate,
            review_verdict(os.path.join(args.tasks, t["task_id"]))))
    table = "\n".join(rows)
    with open(args.doc) as f:
        doc = f.read()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    doc = doc[:start] + "\n" + table + "\n" + doc[end:]
    with open(args.doc, "w") as f:
        f.write(doc)
    print(f"{args.doc}: {len(rows) - 2} tasks; suite supported: {summary['supported']}")


if __name__ == "__main__":
    main()
