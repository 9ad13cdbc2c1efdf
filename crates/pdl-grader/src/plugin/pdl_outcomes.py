"""pytest plugin of the pdl-swe grader: writes every test's outcome as it is known.

Loaded with ``-p pdl_outcomes``. Writes JSON lines to the file named by
``PDL_OUTCOMES_FILE`` (opened before any task code is imported, flushed after
every line), so a run that is killed part-way still leaves the outcomes it
reached. Events:

  {"event": "start", "python": "3.11.7"}
  {"event": "collected", "nodeids": [...]}         every item collected
  {"event": "collect_error", "nodeid": "...", "message": "..."}
  {"event": "begin", "nodeid": "..."}              a test started
  {"event": "report", "nodeid": "...", "when": "setup|call|teardown",
   "outcome": "passed|failed|skipped", "xfail": bool}
  {"event": "compile_error", "path": "...", "message": "..."}
  {"event": "finish", "exitstatus": 0}

With ``PDL_SELECT_FILE`` set, only the node IDs listed in that file (one per
line) run; the others are deselected. With ``PDL_COMPILE_CHECK=1`` every ``.py``
file under the root directory is compiled in memory (nothing is written).
"""

import json
import os
import sys

_out = open(os.environ["PDL_OUTCOMES_FILE"], "a", encoding="utf-8")
os.environ.pop("PDL_OUTCOMES_FILE", None)
_write_line = _out.write
_flush = _out.flush
_dumps = json.dumps
_SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".venv", "venv", "node_modules"}


def _emit(**event):
    _write_line(_dumps(event) + "\n")
    _flush()


_emit(event="start", python="%d.%d.%d" % sys.version_info[:3])


def _compile_check(root):
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            try:
                with open(path, "rb") as handle:
                    source = handle.read()
                compile(source, rel, "exec", dont_inherit=True)
            except (SyntaxError, ValueError, OSError) as exc:
                _emit(event="compile_error", path=rel, message="%s: %s" % (type(exc).__name__, exc))


def pytest_sessionstart(session):
    if os.environ.get("PDL_COMPILE_CHECK") == "1":
        _compile_check(str(session.config.rootpath))


def pytest_collectreport(report):
    if report.failed:
        _emit(event="collect_error", nodeid=report.nodeid, message=str(report.longrepr)[-4000:])


def pytest_collection_modifyitems(session, config, items):
    _emit(event="collected", nodeids=[item.nodeid for item in items])
    select_file = os.environ.get("PDL_SELECT_FILE")
    if not select_file:
        return
    with open(select_file, encoding="utf-8") as handle:
        wanted = {line.rstrip("\n") for line in handle if line.strip()}
    keep = [item for item in items if item.nodeid in wanted]
    drop = [item for item in items if item.nodeid not in wanted]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_runtest_logstart(nodeid, location):
    _emit(event="begin", nodeid=nodeid)


def pytest_runtest_logreport(report):
    _emit(
        event="report",
        nodeid=report.nodeid,
        when=report.when,
        outcome=report.outcome,
        xfail=hasattr(report, "wasxfail"),
    )


def pytest_sessionfinish(session, exitstatus):
    _emit(event="finish", exitstatus=int(exitstatus))
