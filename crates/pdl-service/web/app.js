// The service's page: every call carries the key from session storage.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  let key = sessionStorage.getItem("pdl-swe-key") || "";
  let timer = null;

  function fmt(x) { return x === null || x === undefined ? "–" : Number(x).toFixed(3); }
  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }
  async function api(path) {
    const r = await fetch(path, { headers: { Authorization: "Bearer " + key } });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
    return body;
  }
  function show(id) {
    for (const s of ["signin", "runs", "run", "board"]) $(s).hidden = s !== id;
    if (timer && id !== "run") { clearTimeout(timer); timer = null; }
  }
  function fail(e) { $("error").textContent = String(e.message || e); }

  async function signIn(k, then) {
    key = k;
    try {
      const me = await api("/api/whoami");
      sessionStorage.setItem("pdl-swe-key", key);
      $("who").textContent = me.name + " (" + me.role + ")";
      $("nav").hidden = false;
      $("signin-error").textContent = "";
      if (then) await openRun(then); else await listRuns();
    } catch (e) {
      key = "";
      sessionStorage.removeItem("pdl-swe-key");
      $("signin-error").textContent = String(e.message || e);
      show("signin");
    }
  }

  async function listRuns() {
    show("runs");
    const runs = await api("/api/runs");
    const body = $("runs-table").tBodies[0];
    body.replaceChildren();
    for (const r of runs) {
      const tr = document.createElement("tr");
      const a = document.createElement("a");
      a.className = "link"; a.textContent = r.id; a.dataset.run = r.id;
      a.addEventListener("click", () => openRun(r.id).catch(fail));
      const td = document.createElement("td"); td.appendChild(a); tr.appendChild(td);
      cell(tr, r.dataset); cell(tr, r.submitted_by); cell(tr, r.created_at); cell(tr, r.state);
      cell(tr, r.done + "/" + r.total, "num"); cell(tr, fmt(r.mean_reward), "num");
      body.appendChild(tr);
    }
  }

  async function openRun(id) {
    show("run");
    $("report-frame").hidden = true;
    const report = await api("/api/runs/" + encodeURIComponent(id) + "/report");
    const run = report.run;
    $("run-id").textContent = run.id;
    $("run-state").textContent = run.state;
    $("run-progress").textContent = run.done + " of " + run.total + " graded";
    $("run-mean").textContent = fmt(run.mean_reward);
    $("run-bar").style.width = (run.total ? (100 * run.done / run.total) : 0) + "%";
    const body = $("records").tBodies[0];
    body.replaceChildren();
    report.records.forEach((rec, i) => {
      const tr = document.createElement("tr");
      tr.className = "record";
      cell(tr, String(i + 1));
      cell(tr, rec.instance_id);
      cell(tr, rec.model_name_or_path || "");
      const td = cell(tr, fmt(rec.reward), "num reward");
      td.dataset.reward = String(rec.reward);
      cell(tr, rec.verdict, "verdict");
      const c = rec.components || {};
      cell(tr, fmt(c.hidden_pass_fraction), "num");
      cell(tr, fmt(c.public_regression), "num");
      cell(tr, fmt(c.build_health), "num");
      cell(tr, rec.landed_rung || "");
      body.appendChild(tr);
    });
    document.body.dataset.run = run.id;
    document.body.dataset.runState = run.state;
    if (run.state !== "finished") timer = setTimeout(() => openRun(id).catch(fail), 1000);
    $("show-html").onclick = () => showHtml(id).catch(fail);
  }

  async function showHtml(id) {
    const r = await fetch("/api/runs/" + encodeURIComponent(id) + "/report.html", { headers: { Authorization: "Bearer " + key } });
    if (!r.ok) throw new Error("HTTP " + r.status);
    const blob = new Blob([await r.text()], { type: "text/html" });
    const frame = $("report-frame");
    frame.src = URL.createObjectURL(blob);
    frame.hidden = false;
  }

  async function board() {
    show("board");
    const sets = await api("/api/datasets");
    const sel = $("board-dataset");
    const keep = sel.value;
    sel.replaceChildren();
    for (const d of sets) {
      const o = document.createElement("option"); o.value = d.name; o.textContent = d.name; sel.appendChild(o);
    }
    if (keep) sel.value = keep;
    if (!sel.value) return;
    const rows = await api("/api/datasets/" + encodeURIComponent(sel.value) + "/leaderboard");
    const body = $("board-table").tBodies[0];
    body.replaceChildren();
    rows.forEach((r, i) => {
      const tr = document.createElement("tr");
      cell(tr, String(i + 1)); cell(tr, r.model); cell(tr, r.submitter); cell(tr, fmt(r.mean_reward), "num");
      cell(tr, String(r.records), "num"); cell(tr, String(r.runs), "num");
      body.appendChild(tr);
    });
  }

  $("signin-form").addEventListener("submit", (ev) => { ev.preventDefault(); signIn($("key").value.trim()); });
  $("nav-runs").addEventListener("click", () => listRuns().catch(fail));
  $("nav-board").addEventListener("click", () => board().catch(fail));
  $("board-dataset").addEventListener("change", () => board().catch(fail));
  $("nav-signout").addEventListener("click", () => {
    sessionStorage.removeItem("pdl-swe-key"); key = ""; $("nav").hidden = true; $("who").textContent = ""; show("signin");
  });

  // A key and a run may come in the fragment (never sent to the server):
  // #key=…&run=…; the fragment is cleared at once.
  const frag = new URLSearchParams(location.hash.slice(1));
  if (frag.get("key")) {
    const k = frag.get("key"), run = frag.get("run");
    history.replaceState(null, "", location.pathname);
    signIn(k, run);
  } else if (key) {
    signIn(key, null);
  } else {
    show("signin");
  }
})();
