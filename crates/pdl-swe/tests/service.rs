//! The evaluation service end to end: the real binary serves on a free port,
//! on SQLite and on a private PostgreSQL cluster the test starts, driven
//! through the client commands and over raw HTTP.
//!
//! PostgreSQL (`initdb`, `pg_ctl`) and Chromium are required: a test that
//! needs one fails when it is missing, unless `PDL_SWE_SKIP_SERVICE_DEPS=1`
//! (a local opt-out CI never sets).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The heavy tests run one after another (the machine has two cores).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_pdl-swe")
}

fn skip_deps() -> bool {
    std::env::var("PDL_SWE_SKIP_SERVICE_DEPS").is_ok_and(|v| v == "1")
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs the binary with `key` as PDL_SWE_API_KEY.
fn cli(args: &[&str], key: Option<&str>) -> Output {
    let mut c = Command::new(bin());
    c.args(args).env_remove("PDL_SWE_API_KEY");
    if let Some(k) = key {
        c.env("PDL_SWE_API_KEY", k);
    }
    c.output().expect("the binary runs")
}

/// Where the service keeps its state.
#[derive(Clone)]
struct Store {
    data_dir: PathBuf,
    database: Option<String>,
}

impl Store {
    fn args(&self) -> Vec<String> {
        let mut a = vec![
            "--data-dir".to_string(),
            self.data_dir.display().to_string(),
        ];
        if let Some(db) = &self.database {
            a.push("--database".into());
            a.push(db.clone());
        }
        a
    }

    fn create_key(&self, name: &str, role: &str, extra: &[&str]) -> String {
        let mut args = vec!["serve", "keys", "create", "--name", name, "--role", role];
        let store = self.args();
        args.extend(store.iter().map(String::as_str));
        args.extend(extra);
        let out = cli(&args, None);
        assert!(out.status.success(), "{}", text(&out));
        let key = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert!(key.starts_with("pdlk_"), "{key}");
        key
    }
}

/// A running `pdl-swe serve`.
struct Service {
    child: Child,
    url: String,
    addr: String,
    log: PathBuf,
}

impl Service {
    fn start(store: &Store, extra: &[&str]) -> Service {
        let log = store.data_dir.with_extension(format!(
            "log-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let mut c = Command::new(bin());
        c.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "-j",
            "2",
            "--test-timeout",
            "4",
            "--lease-seconds",
            "2",
        ])
        .args(store.args())
        .args(extra)
        // Submitters' views move on in short steps here, unless a test sets
        // its own.
        .args(if extra.contains(&"--publish-every") {
            &[][..]
        } else {
            &["--publish-every", "0.2"][..]
        })
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
        let mut child = c.spawn().expect("serve starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            for _ in lines {}
        });
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "the service did not start: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
        };
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_string();
        let addr = url.trim_start_matches("http://").to_string();
        Service {
            child,
            url,
            addr,
            log,
        }
    }

    fn kill9(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }

    fn stop(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill9();
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill9();
        }
    }
}

/// One HTTP exchange, raw: status, the header block, the body.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    headers: String,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} {e}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
    fn error(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// Every answer of a session, for the leak scan.
#[derive(Default)]
struct Transcript {
    answers: Vec<Answer>,
}

impl Transcript {
    fn http(
        &mut self,
        addr: &str,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: &[u8],
    ) -> Answer {
        let a = http(addr, method, path, key, body);
        self.answers.push(a.clone());
        a
    }
}

fn http(addr: &str, method: &str, path: &str, key: Option<&str>, body: &[u8]) -> Answer {
    let mut head = format!("Content-Length: {}\r\n", body.len());
    if let Some(k) = key {
        head.push_str(&format!("Authorization: Bearer {k}\r\n"));
    }
    http_raw(addr, method, path, &head, body)
}

/// A request with the header lines `head` (each ending in CRLF) as given.
fn http_raw(addr: &str, method: &str, path: &str, head: &str, body: &[u8]) -> Answer {
    let mut s = TcpStream::connect(addr).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let req =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{head}\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // A refused request may be answered before the body is read.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(&raw)));
    let headers = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    let status = headers
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap();
    Answer {
        status,
        headers,
        body,
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&raw[..end])
                .split(';')
                .next()
                .unwrap()
                .trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[end + 2..end + 2 + size]);
        raw = &raw[end + 2 + size + 2..];
    }
}

fn wait_finished(addr: &str, key: &str, run: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let a = http(addr, "GET", &format!("/api/runs/{run}"), Some(key), b"");
        assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
        let v = a.json();
        if v["state"] == "finished" {
            return v;
        }
        assert!(Instant::now() < deadline, "run {run} did not finish: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A private PostgreSQL cluster in a temporary folder, run by an
/// unprivileged user; stopped when dropped.
struct Postgres {
    dir: tempfile::TempDir,
    url: String,
    bin: PathBuf,
    as_user: Option<String>,
}

fn pg_bin() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists() && p.join("pg_ctl").exists())
        .collect();
    versions.sort();
    versions.pop()
}

impl Postgres {
    /// Starts a cluster, or `None` when PostgreSQL is missing and the local
    /// opt-out is set (otherwise a missing PostgreSQL fails the test).
    fn start() -> Option<Postgres> {
        let Some(bin) = pg_bin() else {
            if skip_deps() {
                eprintln!("PostgreSQL missing; skipped (PDL_SWE_SKIP_SERVICE_DEPS=1)");
                return None;
            }
            panic!("PostgreSQL (initdb, pg_ctl under /usr/lib/postgresql) is needed: apt-get install postgresql (.ci/run does)");
        };
        let dir = tempfile::Builder::new()
            .prefix("pdl-pg-")
            .tempdir()
            .unwrap();
        // initdb refuses to run as root: the cluster belongs to `postgres`.
        let as_user = (unsafe { libc::geteuid() } == 0).then(|| "postgres".to_string());
        if let Some(user) = &as_user {
            let ok = Command::new("chown")
                .args(["-R", user])
                .arg(dir.path())
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown to {user} failed");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let data = dir.path().join("data");
        let port = free_port();
        let pg = Postgres {
            url: format!("postgres://pdl@127.0.0.1:{port}/postgres"),
            dir,
            bin,
            as_user,
        };
        let out = pg.run(&[
            "initdb",
            "-D",
            data.to_str().unwrap(),
            "-U",
            "pdl",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]);
        assert!(out.status.success(), "initdb: {}", text(&out));
        let opts = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            pg.dir.path().display()
        );
        let log = pg.dir.path().join("pg.log");
        let out = pg.run(&[
            "pg_ctl",
            "-D",
            data.to_str().unwrap(),
            "-o",
            &opts,
            "-l",
            log.to_str().unwrap(),
            "-w",
            "-t",
            "60",
            "start",
        ]);
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n{}",
            text(&out),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        Some(pg)
    }

    fn run(&self, args: &[&str]) -> Output {
        let program = self.bin.join(args[0]);
        let mut c = match &self.as_user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&program);
                c
            }
            None => Command::new(&program),
        };
        c.args(&args[1..])
            .current_dir(self.dir.path())
            .output()
            .unwrap()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = self.run(&[
            "pg_ctl",
            "-D",
            data.to_str().unwrap(),
            "-m",
            "immediate",
            "stop",
        ]);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The fixture tasks as a tar of task trees.
fn fixture_tar(dir: &Path) -> PathBuf {
    let tar = dir.join("tasks.tar");
    let ok = Command::new("tar")
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(fixtures())
        .arg("tasks")
        .status()
        .unwrap()
        .success();
    assert!(ok);
    tar
}

/// The fixture tasks as JSONL.
fn fixture_jsonl(dir: &Path) -> PathBuf {
    let path = dir.join("tasks.jsonl");
    let out = cli(
        &[
            "tasks",
            "export",
            "--dataset",
            fixtures().join("tasks").to_str().unwrap(),
            "--to",
            path.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    path
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// What must never reach a submitter: lines of hidden tests and of gold
/// patches that are not also public (in the fixtures or the issue), hidden
/// node IDs and test names.
fn secrets() -> BTreeSet<String> {
    let tasks = fixtures().join("tasks");
    let mut public = String::new();
    let mut secret_lines = Vec::new();
    for entry in walk(&tasks) {
        let rel = entry
            .strip_prefix(&tasks)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let content = std::fs::read_to_string(&entry).unwrap_or_default();
        if rel.contains("/fixtures/") || rel.ends_with("manifest.yaml") {
            public.push_str(&content);
            if rel.ends_with("manifest.yaml") {
                for line in content.lines() {
                    // Hidden node IDs are in the manifest: secret as IDs.
                    if let Some(id) = line.trim().strip_prefix("- tests/hidden/") {
                        secret_lines.push(format!("tests/hidden/{id}"));
                        if let Some((_, name)) = id.split_once("::") {
                            secret_lines.push(name.to_string());
                        }
                    }
                }
            }
        } else if rel.contains("/hidden/") {
            secret_lines.extend(content.lines().map(|l| l.trim().to_string()));
        } else if rel.contains("/solution/") || rel.contains("/ladder/") {
            for line in content.lines() {
                if let Some(added) = line.strip_prefix('+').filter(|_| !line.starts_with("+++")) {
                    secret_lines.push(added.trim().to_string());
                }
            }
        }
    }
    secret_lines
        .into_iter()
        .filter(|l| {
            l.len() >= 12
                && (l.starts_with("tests/hidden/")
                    || l.starts_with("test_")
                    || !public.contains(l.as_str()))
        })
        .collect()
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Fails on any secret or key in `haystack`, naming where it was.
fn scan(haystack: &[u8], secrets: &BTreeSet<String>, keys: &[&str], what: &str) {
    let text = String::from_utf8_lossy(haystack);
    for s in secrets {
        assert!(!text.contains(s.as_str()), "{what} holds `{s}`");
    }
    for k in keys {
        assert!(!text.contains(k), "{what} holds an API key");
        assert!(
            !text.contains(&k[5..]),
            "{what} holds an API key's secret part"
        );
    }
}

/// Local `pdl-swe grade` of the fixture predictions: (instance, model) →
/// (reward, verdict).
fn local_grades(dir: &Path) -> Vec<Value> {
    let out_path = dir.join("local.jsonl");
    let out = cli(
        &[
            "grade",
            "--dataset",
            fixtures().join("tasks").to_str().unwrap(),
            "--predictions",
            fixtures().join("predictions.jsonl").to_str().unwrap(),
            "--out",
            out_path.to_str().unwrap(),
            "--test-timeout",
            "4",
            "-j",
            "2",
        ],
        None,
    );
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", text(&out));
    read_jsonl(&out_path)
}

/// (instance, model, verdict, reward) of every record, sorted.
fn outcomes(records: &[Value]) -> Vec<(String, String, String, f64)> {
    let mut out: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r["instance_id"].as_str().unwrap_or_default().to_string(),
                r["model_name_or_path"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                r["verdict"].as_str().unwrap().to_string(),
                r["reward"].as_f64().unwrap(),
            )
        })
        .collect();
    out.sort_by(|a, b| {
        (&a.0, &a.1, &a.2)
            .cmp(&(&b.0, &b.1, &b.2))
            .then(a.3.total_cmp(&b.3))
    });
    out
}

/// The whole flow on one database: keys, upload, submit --wait through the
/// client, the rewards of a local grade, and a raw HTTP session over every
/// route scanned for hidden tests, gold patches and keys.
fn whole_flow(store: &Store, upload: &Path, public_ladders: bool) {
    let work = tempfile::tempdir().unwrap();
    let admin = store.create_key("admin", "admin", &[]);
    let alice = store.create_key("alice", "submitter", &[]);
    let bob = store.create_key("bob", "submitter", &[]);
    let keys = [admin.as_str(), alice.as_str(), bob.as_str()];
    let mut service = Service::start(store, &[]);

    let mut upload_args = vec![
        "datasets",
        "upload",
        "--server",
        &service.url,
        "--name",
        "fixtures",
        upload.to_str().unwrap(),
        "--grant",
        "alice",
    ];
    if public_ladders {
        upload_args.push("--public-ladders");
    }
    let out = cli(&upload_args, Some(&admin));
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 tasks"),
        "{}",
        text(&out)
    );

    // A submitter cannot upload; bob is not granted the dataset.
    let out = cli(
        &[
            "datasets",
            "upload",
            "--server",
            &service.url,
            "--name",
            "x",
            upload.to_str().unwrap(),
        ],
        Some(&alice),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = cli(
        &[
            "submit",
            "--server",
            &service.url,
            "--dataset",
            "fixtures",
            fixtures().join("predictions.jsonl").to_str().unwrap(),
        ],
        Some(&bob),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no dataset"),
        "{}",
        text(&out)
    );

    let results = work.path().join("results.jsonl");
    let out = cli(
        &[
            "submit",
            "--server",
            &service.url,
            "--dataset",
            "fixtures",
            fixtures().join("predictions.jsonl").to_str().unwrap(),
            "--wait",
            "--out",
            results.to_str().unwrap(),
        ],
        Some(&alice),
    );
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", text(&out));
    let submit_stdout = out.stdout.clone();
    let remote = read_jsonl(&results);
    let local = local_grades(work.path());
    assert_eq!(remote.len(), local.len(), "one record per prediction");
    for (r, l) in outcomes(&remote).iter().zip(outcomes(&local).iter()) {
        assert_eq!(
            (&r.0, &r.1, &r.2),
            (&l.0, &l.1, &l.2),
            "remote {r:?} local {l:?}"
        );
        assert!((r.3 - l.3).abs() < 1e-9, "remote {r:?} local {l:?}");
    }
    // The submitter's view: section-10 keys, no hidden node ID.
    for r in &remote {
        for key in [
            "instance_id",
            "model_name_or_path",
            "kind",
            "reward",
            "components",
            "verdict",
            "tests",
            "policy",
            "landed_rung",
            "duration_s",
            "provenance",
        ] {
            assert!(r.get(key).is_some(), "{key} missing in {r}");
        }
        for id in r["tests"].as_object().unwrap().keys() {
            assert!(!id.starts_with("tests/hidden/"), "{id}");
        }
    }
    let rung = remote
        .iter()
        .find(|r| r["model_name_or_path"] == "rung-copy")
        .unwrap();
    if public_ladders {
        assert_eq!(rung["landed_rung"], "positive_only.diff");
    } else {
        assert_eq!(rung["landed_rung"], Value::Null);
    }
    assert!((rung["components"]["hidden_pass_fraction"].as_f64().unwrap() - 0.5).abs() < 1e-9);

    // runs list / show / report through the client.
    let out = cli(
        &["runs", "list", "--server", &service.url, "--format", "json"],
        Some(&alice),
    );
    assert!(out.status.success(), "{}", text(&out));
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1);
    let run_id = runs[0]["id"].as_str().unwrap().to_string();
    assert_eq!(runs[0]["state"], "finished");
    let out = cli(
        &["runs", "show", "--server", &service.url, &run_id],
        Some(&alice),
    );
    assert!(out.status.success(), "{}", text(&out));
    let report_out = work.path().join("report.jsonl");
    let out = cli(
        &[
            "runs",
            "report",
            "--server",
            &service.url,
            &run_id,
            "--out",
            report_out.to_str().unwrap(),
        ],
        Some(&alice),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(read_jsonl(&report_out), remote);
    // Bob sees neither the run nor the dataset.
    let out = cli(
        &["runs", "show", "--server", &service.url, &run_id],
        Some(&bob),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    // A raw session over every route, scanned.
    let addr = service.addr.clone();
    let mut t = Transcript::default();
    assert_eq!(t.http(&addr, "GET", "/api/health", None, b"").status, 200);
    assert_eq!(t.http(&addr, "GET", "/api/whoami", None, b"").status, 401);
    assert_eq!(
        t.http(&addr, "GET", "/api/whoami", Some("pdlk_wrong"), b"")
            .status,
        401
    );
    for path in ["/", "/app.js", "/openapi.yaml"] {
        assert_eq!(t.http(&addr, "GET", path, None, b"").status, 200, "{path}");
    }
    for key in [&alice, &admin] {
        assert_eq!(
            t.http(&addr, "GET", "/api/whoami", Some(key), b"").status,
            200
        );
        let sets = t.http(&addr, "GET", "/api/datasets", Some(key), b"");
        assert_eq!(sets.json().as_array().unwrap().len(), 1);
        let detail = t.http(&addr, "GET", "/api/datasets/fixtures", Some(key), b"");
        assert_eq!(detail.status, 200);
        let tasks = detail.json()["tasks"].clone();
        assert_eq!(tasks.as_array().unwrap().len(), 2);
        assert_eq!(tasks[0]["hidden_test_count"], 2);
        assert_eq!(tasks[0].get("ladder").is_some(), public_ladders, "{tasks}");
        let view = t.http(
            &addr,
            "GET",
            "/api/datasets/fixtures/agent-view",
            Some(key),
            b"",
        );
        assert_eq!(view.status, 200);
        assert!(String::from_utf8_lossy(&view.body).contains("ISSUE.md"));
        let board = t.http(
            &addr,
            "GET",
            "/api/datasets/fixtures/leaderboard",
            Some(key),
            b"",
        );
        assert_eq!(board.status, 200);
        assert!(board
            .json()
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["model"] == "gold-copy"));
        assert_eq!(
            t.http(&addr, "GET", "/api/runs", Some(key), b"").status,
            200
        );
        assert_eq!(
            t.http(&addr, "GET", &format!("/api/runs/{run_id}"), Some(key), b"")
                .status,
            200
        );
        let report = t.http(
            &addr,
            "GET",
            &format!("/api/runs/{run_id}/report"),
            Some(key),
            b"",
        );
        assert_eq!(
            report.json()["records"].as_array().unwrap().len(),
            remote.len()
        );
        let html = t.http(
            &addr,
            "GET",
            &format!("/api/runs/{run_id}/report.html"),
            Some(key),
            b"",
        );
        assert_eq!(html.status, 200);
        assert!(String::from_utf8_lossy(&html.body).contains("gold-copy"));
    }
    assert_eq!(
        t.http(&addr, "GET", "/api/datasets/fixtures", Some(&bob), b"")
            .status,
        404
    );
    assert_eq!(
        t.http(
            &addr,
            "GET",
            &format!("/api/runs/{run_id}/report"),
            Some(&bob),
            b""
        )
        .status,
        404
    );
    assert_eq!(
        t.http(&addr, "GET", "/api/nothing", Some(&alice), b"")
            .status,
        404
    );

    let secrets = secrets();
    assert!(
        secrets.iter().any(|s| s.contains("test_mul_negative")),
        "{secrets:?}"
    );
    assert!(secrets.len() >= 4, "{secrets:?}");
    for (i, a) in t.answers.iter().enumerate() {
        scan(
            a.headers.as_bytes(),
            &secrets,
            &keys,
            &format!("answer {i}'s headers"),
        );
        scan(&a.body, &secrets, &keys, &format!("answer {i}'s body"));
    }
    scan(
        &std::fs::read(&results).unwrap(),
        &secrets,
        &keys,
        "submit --out",
    );
    scan(&submit_stdout, &secrets, &keys, "submit's output");
    // Keys never reach the service's log either.
    scan(
        service.log_text().as_bytes(),
        &BTreeSet::new(),
        &keys,
        "the service's log",
    );

    // Delete: the run and its records are gone.
    let out = cli(
        &["runs", "delete", "--server", &service.url, &run_id],
        Some(&alice),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        http(
            &addr,
            "GET",
            &format!("/api/runs/{run_id}"),
            Some(&alice),
            b""
        )
        .status,
        404
    );
    service.stop();
}

#[test]
fn the_whole_flow_on_sqlite_matches_a_local_grade_and_leaks_nothing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = Store {
        data_dir: dir.path().join("data"),
        database: None,
    };
    whole_flow(&store, &fixture_tar(dir.path()), false);
    assert!(store.data_dir.join("service.db").exists());
}

#[test]
fn the_whole_flow_on_postgresql_matches_a_local_grade_and_leaks_nothing() {
    let _serial = serial();
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = Store {
        data_dir: dir.path().join("data"),
        database: Some(pg.url.clone()),
    };
    whole_flow(&store, &fixture_jsonl(dir.path()), true);
    assert!(
        !store.data_dir.join("service.db").exists(),
        "PostgreSQL holds the state"
    );
}

/// A patch that makes every test run of the task sleep `secs` first.
fn slow_patch(secs: u32) -> String {
    format!(
        "diff --git a/src/calc.py b/src/calc.py\n--- a/src/calc.py\n+++ b/src/calc.py\n@@ -1,4 +1,6 @@\n \"\"\"Tiny arithmetic helpers.\"\"\"\n+import time\n+time.sleep({secs})\n \n \n def add(a, b):\n"
    )
}

/// The processes below `pid` (a grading's sandbox helper and its tests).
fn descendants(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The parent is the second field after the command's closing parenthesis.
        if let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
        {
            parents.push((child, ppid));
        }
    }
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// `kill -9` of the service while a worker grades, a restart, and
/// afterwards exactly one record per prediction.
fn kill_and_restart(store: &Store) {
    let work = tempfile::tempdir().unwrap();
    let admin = store.create_key("admin", "admin", &[]);
    let alice = store.create_key("alice", "submitter", &[]);
    let mut service = Service::start(store, &[]);
    let tar = fixture_tar(work.path());
    let out = cli(
        &[
            "datasets",
            "upload",
            "--server",
            &service.url,
            "--name",
            "fx",
            tar.to_str().unwrap(),
        ],
        Some(&admin),
    );
    assert!(out.status.success(), "{}", text(&out));
    let preds: String = (0..4)
        .map(|i| {
            serde_json::json!({
                "instance_id": "pdl_fixture_calc_001-v1",
                "model_name_or_path": format!("slow-{i}"),
                "model_patch": slow_patch(2),
            })
            .to_string()
                + "\n"
        })
        .collect();
    let submitted = http(
        &service.addr,
        "POST",
        "/api/runs?dataset=fx",
        Some(&alice),
        preds.as_bytes(),
    );
    assert_eq!(
        submitted.status,
        201,
        "{}",
        String::from_utf8_lossy(&submitted.body)
    );
    let run = submitted.json()["id"].as_str().unwrap().to_string();
    // Wait until a worker is inside a grading (its sandbox runs the slow
    // test run), then kill the service outright. (Only an admin sees which
    // jobs are running.)
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let v = http(
            &service.addr,
            "GET",
            &format!("/api/runs/{run}"),
            Some(&admin),
            b"",
        )
        .json();
        // One grading of a key at a time, whatever -j.
        assert!(v["running"].as_i64().unwrap_or(0) <= 1, "{v}");
        if v["running"].as_i64().unwrap_or(0) > 0 && v["done"].as_i64().unwrap_or(0) < 4 {
            std::thread::sleep(Duration::from_millis(800));
            break;
        }
        assert!(Instant::now() < deadline, "no job started: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = http(
        &service.addr,
        "GET",
        &format!("/api/runs/{run}"),
        Some(&admin),
        b"",
    )
    .json();
    assert!(
        !descendants(service.child.id()).is_empty(),
        "no sandbox under the service while it grades"
    );
    service.kill9();
    assert!(
        before["done"].as_i64().unwrap() < 4,
        "killed too late: {before}"
    );

    let service = Service::start(store, &[]);
    let finished = wait_finished(&service.addr, &alice, &run, Duration::from_secs(180));
    assert_eq!(finished["done"], 4, "{finished}");
    let report = http(
        &service.addr,
        "GET",
        &format!("/api/runs/{run}/report"),
        Some(&alice),
        b"",
    )
    .json();
    let records = report["records"].as_array().unwrap();
    assert_eq!(records.len(), 4, "exactly one record per prediction");
    let models: BTreeSet<&str> = records
        .iter()
        .map(|r| r["model_name_or_path"].as_str().unwrap())
        .collect();
    assert_eq!(models.len(), 4, "{models:?}");
    for r in records {
        assert_eq!(r["verdict"], "graded", "{r}");
        assert!((r["reward"].as_f64().unwrap() - 0.2).abs() < 1e-9, "{r}");
    }
    // The board counts each record once.
    let board = http(
        &service.addr,
        "GET",
        "/api/datasets/fx/leaderboard",
        Some(&alice),
        b"",
    )
    .json();
    let total: i64 = board
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["records"].as_i64().unwrap())
        .sum();
    assert_eq!(total, 4, "{board}");
}

/// Runs `flow` on a fresh data folder with the embedded SQLite database.
fn on_sqlite(flow: impl FnOnce(&Store)) {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    flow(&Store {
        data_dir: dir.path().join("data"),
        database: None,
    });
}

/// Runs `flow` on a fresh data folder and a private PostgreSQL cluster.
fn on_postgresql(flow: impl FnOnce(&Store)) {
    let _serial = serial();
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    flow(&Store {
        data_dir: dir.path().join("data"),
        database: Some(pg.url.clone()),
    });
}

#[test]
fn kill_9_mid_grading_loses_and_duplicates_nothing_on_sqlite() {
    on_sqlite(kill_and_restart);
}

#[test]
fn kill_9_mid_grading_loses_and_duplicates_nothing_on_postgresql() {
    on_postgresql(kill_and_restart);
}

/// Files the data folder's `datasets/` holds.
fn stored_datasets(store: &Store) -> usize {
    std::fs::read_dir(store.data_dir.join("datasets")).map_or(0, |d| d.count())
}

#[test]
fn quotas_rate_limits_and_malformed_uploads_are_refused_and_change_nothing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = Store {
        data_dir: dir.path().join("data"),
        database: None,
    };
    let admin = store.create_key("admin", "admin", &[]);
    let carol = store.create_key(
        "carol",
        "submitter",
        &[
            "--runs-per-day",
            "1",
            "--predictions-per-run",
            "2",
            "--requests-per-minute",
            "1000",
        ],
    );
    let dave = store.create_key("dave", "submitter", &["--requests-per-minute", "5"]);
    let service = Service::start(&store, &["--max-dataset-bytes", "200000"]);
    let addr = service.addr.clone();
    let count = |key: &str| {
        http(&addr, "GET", "/api/datasets", Some(key), b"")
            .json()
            .as_array()
            .unwrap()
            .len()
    };

    // Malformed uploads: a clear 4xx naming the problem, nothing stored.
    let good = std::fs::read_to_string(fixture_jsonl(dir.path())).unwrap();
    let mut bad_line = good.lines().next().unwrap().to_string();
    bad_line = bad_line.replacen("\"token_budget\":10000", "\"token_budget\":\"lots\"", 1);
    assert!(
        bad_line.contains("\"lots\""),
        "the fixture row changed shape"
    );
    let bad_jsonl = format!("{}\n{bad_line}\n", good.lines().next().unwrap());
    let a = http(
        &addr,
        "POST",
        "/api/datasets?name=bad&format=jsonl&filename=bad.jsonl",
        Some(&admin),
        bad_jsonl.as_bytes(),
    );
    assert_eq!(a.status, 422, "{}", a.error());
    assert!(
        a.error().contains("bad.jsonl")
            && a.error().contains("line 2")
            && a.error().contains("token_budget"),
        "{}",
        a.error()
    );
    assert!(
        !a.error().contains(&store.data_dir.display().to_string()),
        "{}",
        a.error()
    );

    let a = http(
        &addr,
        "POST",
        "/api/datasets?name=bad&format=jsonl&filename=x.jsonl",
        Some(&admin),
        b"{not json\n",
    );
    assert_eq!(a.status, 422, "{}", a.error());
    assert!(
        a.error().contains("x.jsonl") && a.error().contains("line 1"),
        "{}",
        a.error()
    );

    // A tar with a link and one with a path out of its folder.
    let links = dir.path().join("links");
    std::fs::create_dir_all(links.join("t")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", links.join("t/manifest.yaml")).unwrap();
    let link_tar = dir.path().join("links.tar");
    assert!(Command::new("tar")
        .arg("-cf")
        .arg(&link_tar)
        .arg("-C")
        .arg(&links)
        .arg("t")
        .status()
        .unwrap()
        .success());
    let a = http(
        &addr,
        "POST",
        "/api/datasets?name=bad&format=tar&filename=links.tar",
        Some(&admin),
        &std::fs::read(&link_tar).unwrap(),
    );
    assert_eq!(a.status, 422, "{}", a.error());
    assert!(
        a.error().contains("links.tar") && a.error().contains("t/manifest.yaml"),
        "{}",
        a.error()
    );
    let mut escape = tar_header("../evil.txt", 4);
    escape.extend_from_slice(b"evil");
    escape.resize(1024 + 512 * 2, 0);
    let a = http(
        &addr,
        "POST",
        "/api/datasets?name=bad&format=tar&filename=e.tar",
        Some(&admin),
        &escape,
    );
    assert_eq!(a.status, 422, "{}", a.error());
    assert!(a.error().contains("../evil.txt"), "{}", a.error());
    assert!(!dir.path().join("evil.txt").exists() && !store.data_dir.join("evil.txt").exists());

    let a = http(
        &addr,
        "POST",
        "/api/datasets?name=bad%2Fname",
        Some(&admin),
        good.as_bytes(),
    );
    assert_eq!(a.status, 400, "{}", a.error());
    assert!(a.error().contains("`name`"), "{}", a.error());
    let a = http(
        &addr,
        "POST",
        "/api/datasets?name=x&grants=nobody",
        Some(&admin),
        good.as_bytes(),
    );
    assert_eq!(a.status, 400, "{}", a.error());
    assert!(a.error().contains("nobody"), "{}", a.error());
    let a = http(
        &addr,
        "POST",
        "/api/datasets?name=x",
        Some(&carol),
        good.as_bytes(),
    );
    assert_eq!(a.status, 403, "{}", a.error());
    let a = http(
        &addr,
        "POST",
        "/api/datasets?name=big",
        Some(&admin),
        &vec![b' '; 300_000],
    );
    assert_eq!(a.status, 413);
    assert!(a.error().contains("200000 bytes"), "{}", a.error());
    // A declared length over the bound is answered at once, before any body.
    let started = Instant::now();
    let a = http_raw(
        &addr,
        "POST",
        "/api/datasets?name=huge",
        &format!("Authorization: Bearer {admin}\r\nContent-Length: 999999999\r\n"),
        b"",
    );
    assert_eq!(a.status, 413, "{}", String::from_utf8_lossy(&a.body));
    assert!(a.error().contains("larger than"), "{}", a.error());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // One upload of a key at a time: a body is held in memory until read.
    let mut slow = TcpStream::connect(&addr).unwrap();
    write!(
        slow,
        "POST /api/runs?dataset=fx HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {admin}\r\nContent-Length: 60000\r\n\r\n{{"
    )
    .unwrap();
    slow.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let a = http(&addr, "POST", "/api/runs?dataset=fx", Some(&admin), b"[]");
    assert_eq!(a.status, 429, "{}", String::from_utf8_lossy(&a.body));
    assert!(a.error().contains("one at a time"), "{}", a.error());
    drop(slow);
    std::thread::sleep(Duration::from_millis(300));
    // Listing is not an upload.
    assert_eq!(
        http(&addr, "GET", "/api/runs", Some(&admin), b"").status,
        200
    );
    // The scheme is case-insensitive.
    let a = http_raw(
        &addr,
        "GET",
        "/api/whoami",
        &format!("Authorization: bearer {admin}\r\nContent-Length: 0\r\n"),
        b"",
    );
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(count(&admin), 0);
    assert_eq!(
        stored_datasets(&store),
        0,
        "a refused upload stores nothing"
    );

    // A good upload, then the same name again.
    let a = http(
        &addr,
        "POST",
        "/api/datasets?name=fx&format=jsonl",
        Some(&admin),
        good.as_bytes(),
    );
    assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
    let a = http(
        &addr,
        "POST",
        "/api/datasets?name=fx&format=jsonl",
        Some(&admin),
        good.as_bytes(),
    );
    assert_eq!(a.status, 409, "{}", a.error());
    assert_eq!(count(&admin), 1);
    assert_eq!(stored_datasets(&store), 1);

    // Predictions: unreadable, too many, then the run quota.
    let runs = |key: &str| {
        http(&addr, "GET", "/api/runs", Some(key), b"")
            .json()
            .as_array()
            .unwrap()
            .len()
    };
    let a = http(
        &addr,
        "POST",
        "/api/runs?dataset=fx&filename=p.json",
        Some(&carol),
        b"[{\"instance_id\": ",
    );
    assert_eq!(a.status, 400, "{}", a.error());
    assert!(a.error().contains("p.json"), "{}", a.error());
    let a = http(&addr, "POST", "/api/runs?dataset=fx", Some(&carol), b"");
    assert_eq!(a.status, 400, "{}", a.error());
    // Nothing gradable at all (not text, not JSON): refused whole, no run spent.
    let a = http(
        &addr,
        "POST",
        "/api/runs?dataset=fx&filename=bin.jsonl",
        Some(&carol),
        b"\xff\xfe\x00garbage\n{not json}\n",
    );
    assert_eq!(a.status, 400, "{}", String::from_utf8_lossy(&a.body));
    assert!(
        a.error().contains("bin.jsonl") && a.error().contains("not UTF-8"),
        "{}",
        a.error()
    );
    let three = "{\"instance_id\": \"pdl_fixture_calc_001-v1\", \"model_name_or_path\": \"a\", \"model_patch\": \"\"}\n\
                 {\"instance_id\": \"pdl_fixture_calc_001-v1\", \"model_name_or_path\": \"b\", \"model_patch\": \"\"}\n\
                 {\"instance_id\": \"pdl_fixture_calc_001-v1\", \"model_name_or_path\": \"c\", \"model_patch\": \"\"}\n";
    let a = http(
        &addr,
        "POST",
        "/api/runs?dataset=fx",
        Some(&carol),
        three.as_bytes(),
    );
    assert_eq!(a.status, 413, "{}", a.error());
    assert!(a.error().contains("at most 2 predictions"), "{}", a.error());
    assert_eq!(runs(&carol), 0);
    let one = three.lines().next().unwrap();
    let a = http(
        &addr,
        "POST",
        "/api/runs?dataset=fx",
        Some(&carol),
        one.as_bytes(),
    );
    assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
    let a = http(
        &addr,
        "POST",
        "/api/runs?dataset=fx",
        Some(&carol),
        one.as_bytes(),
    );
    assert_eq!(a.status, 429, "{}", a.error());
    assert!(a.error().contains("1 runs a day"), "{}", a.error());
    assert_eq!(runs(&carol), 1);
    let a = http(
        &addr,
        "POST",
        "/api/runs?dataset=nope",
        Some(&carol),
        one.as_bytes(),
    );
    assert_eq!(a.status, 404);

    // The request rate: five a minute for dave, then 429 with Retry-After.
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(http(&addr, "GET", "/api/whoami", Some(&dave), b""));
    }
    assert!(statuses[..5].iter().all(|a| a.status == 200));
    let limited = &statuses[5];
    assert_eq!(limited.status, 429);
    assert!(
        limited
            .headers
            .to_ascii_lowercase()
            .contains("retry-after:"),
        "{}",
        limited.headers
    );
    // Other keys are not affected.
    assert_eq!(
        http(&addr, "GET", "/api/whoami", Some(&carol), b"").status,
        200
    );
    let carol_run = http(&addr, "GET", "/api/runs", Some(&carol), b"").json()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let _ = wait_finished(&addr, &carol, &carol_run, Duration::from_secs(120));
}

/// Uploads the fixture dataset `good` as `fx` with `admin`'s key.
fn upload_fx(addr: &str, admin: &str, good: &[u8]) {
    let a = http(
        addr,
        "POST",
        "/api/datasets?name=fx&format=jsonl",
        Some(admin),
        good,
    );
    assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
}

/// Quotas under concurrent requests of one key: exactly as many runs and
/// uploads pass as the quota allows, deleting refunds nothing, and the
/// leaderboard keeps one submitter's model name apart from another's.
fn quotas_hold_under_races(store: &Store) {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(fixture_jsonl(dir.path())).unwrap();
    // Room for the first upload and two more, not three.
    let budget = (good.len() * 7 / 2).to_string();
    let admin = store.create_key(
        "admin",
        "admin",
        &[
            "--upload-bytes-per-day",
            &budget,
            "--requests-per-minute",
            "1000",
        ],
    );
    let erin = store.create_key(
        "erin",
        "submitter",
        &["--runs-per-day", "2", "--requests-per-minute", "1000"],
    );
    let frank = store.create_key("frank", "submitter", &["--requests-per-minute", "1000"]);
    let service = Service::start(store, &[]);
    let addr = service.addr.clone();
    upload_fx(&addr, &admin, &good);

    // Requests sent at once; one the service turns away because the key is
    // already sending an upload is sent again, so that every request meets
    // the quota check.
    let parallel = |key: &str, paths: Vec<String>, body: &[u8]| -> Vec<Answer> {
        let addr = addr.as_str();
        std::thread::scope(|scope| {
            let handles: Vec<_> = paths
                .iter()
                .map(|path| {
                    scope.spawn(move || loop {
                        let a = http(addr, "POST", path, Some(key), body);
                        if a.status == 429 && a.error().contains("one at a time") {
                            std::thread::sleep(Duration::from_millis(10));
                            continue;
                        }
                        return a;
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let uploads = parallel(
        &admin,
        (0..6)
            .map(|i| format!("/api/datasets?name=race{i}&format=jsonl"))
            .collect(),
        &good,
    );
    let stored = uploads.iter().filter(|a| a.status == 201).count();
    assert_eq!(
        stored,
        2,
        "{:?}",
        uploads.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    assert!(uploads
        .iter()
        .filter(|a| a.status != 201)
        .all(|a| a.status == 429 && a.error().contains("bytes a day")));
    assert_eq!(stored_datasets(store), 3);

    let prediction = b"{\"instance_id\": \"pdl_fixture_calc_001-v1\", \"model_name_or_path\": \"shared-name\", \"model_patch\": \"\"}\n";
    let runs = parallel(
        &erin,
        vec!["/api/runs?dataset=fx".to_string(); 10],
        prediction,
    );
    let started: Vec<String> = runs
        .iter()
        .filter(|a| a.status == 201)
        .map(|a| a.json()["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        started.len(),
        2,
        "{:?}",
        runs.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    assert!(runs
        .iter()
        .filter(|a| a.status != 201)
        .all(|a| a.status == 429 && a.error().contains("2 runs a day")));
    for run in &started {
        wait_finished(&addr, &erin, run, Duration::from_secs(120));
    }
    // Another submitter uses the same model name.
    let a = http(
        &addr,
        "POST",
        "/api/runs?dataset=fx",
        Some(&frank),
        prediction,
    );
    assert_eq!(a.status, 201, "{}", a.error());
    wait_finished(
        &addr,
        &frank,
        a.json()["id"].as_str().unwrap(),
        Duration::from_secs(120),
    );
    let board = || -> BTreeSet<(String, String, i64)> {
        let board = http(
            &addr,
            "GET",
            "/api/datasets/fx/leaderboard",
            Some(&frank),
            b"",
        )
        .json();
        board
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["submitter"].as_str().unwrap().to_string(),
                    r["model"].as_str().unwrap().to_string(),
                    r["records"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let rows = BTreeSet::from([
        ("erin".to_string(), "shared-name".to_string(), 2),
        ("frank".to_string(), "shared-name".to_string(), 1),
    ]);
    assert_eq!(board(), rows);

    // Deleting the runs gives no run back.
    for run in &started {
        let a = http(
            &addr,
            "DELETE",
            &format!("/api/runs/{run}"),
            Some(&erin),
            b"",
        );
        assert!(a.status == 204 || a.status == 200, "{}", a.status);
    }
    let a = http(
        &addr,
        "POST",
        "/api/runs?dataset=fx",
        Some(&erin),
        prediction,
    );
    assert_eq!(a.status, 429, "{}", String::from_utf8_lossy(&a.body));
    // ... and leaves their scores on the leaderboard.
    assert_eq!(board(), rows);
    let me = http(&addr, "GET", "/api/whoami", Some(&erin), b"").json();
    assert_eq!(me["used"]["runs"], 2, "{me}");
    assert_eq!(me["quotas"]["runs_per_day"], 2, "{me}");
    // Each prediction is charged what storing it takes, beside its bytes.
    assert_eq!(
        me["used"]["bytes"].as_i64(),
        Some(2 * (prediction.len() as i64 + 2048)),
        "{me}"
    );
}

/// A submitter sees a run move on only in steps of `--publish-every`: when a
/// record appears, and what it says of times, tell nothing finer of how long
/// its grading took; an admin sees it at once.
#[test]
fn a_submitters_view_moves_on_in_steps() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = Store {
        data_dir: dir.path().join("data"),
        database: None,
    };
    let admin = store.create_key("admin", "admin", &["--requests-per-minute", "1000"]);
    let sam = store.create_key("sam", "submitter", &["--requests-per-minute", "1000"]);
    let service = Service::start(&store, &["--publish-every", "6"]);
    let addr = service.addr.clone();
    let good = std::fs::read(fixture_jsonl(dir.path())).unwrap();
    upload_fx(&addr, &admin, &good);
    let prediction = b"{\"instance_id\": \"pdl_fixture_calc_001-v1\", \"model_name_or_path\": \"m\", \"model_patch\": \"\"}\n";
    let submitted = Instant::now();
    let a = http(
        &addr,
        "POST",
        "/api/runs?dataset=fx",
        Some(&sam),
        prediction,
    );
    assert_eq!(a.status, 201, "{}", a.error());
    let run = a.json()["id"].as_str().unwrap().to_string();
    // The admin sees the record as soon as it is stored.
    let admin_done = wait_finished(&addr, &admin, &run, Duration::from_secs(60));
    let stored_after = submitted.elapsed();
    assert!(
        stored_after < Duration::from_secs(5),
        "{stored_after:?}: too slow to test the step"
    );
    assert_eq!(admin_done["done"], 1);
    // The submitter does not, until the step ends.
    let early = http(&addr, "GET", &format!("/api/runs/{run}"), Some(&sam), b"").json();
    assert_eq!(
        (early["done"].as_i64(), early["running"].as_i64()),
        (Some(0), Some(0)),
        "{early}"
    );
    assert_ne!(early["state"], "finished", "{early}");
    let report = || {
        http(
            &addr,
            "GET",
            &format!("/api/runs/{run}/report"),
            Some(&sam),
            b"",
        )
        .json()
    };
    assert!(report()["records"].as_array().unwrap().is_empty());
    // Nor does the leaderboard show the score before the step (an admin's does).
    let board = |key: &str| {
        http(&addr, "GET", "/api/datasets/fx/leaderboard", Some(key), b"")
            .json()
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!((board(&sam), board(&admin)), (0, 1));
    let finished = wait_finished(&addr, &sam, &run, Duration::from_secs(30));
    let seen_after = submitted.elapsed();
    assert!(seen_after >= Duration::from_millis(5_500), "{seen_after:?}");
    assert_eq!(finished["done"], 1);
    assert_eq!(board(&sam), 1);
    let report = report();
    let record = &report["records"][0];
    assert_eq!(
        record["reward"].as_f64().map(|r| (r - 0.2).abs() < 1e-9),
        Some(true),
        "{record}"
    );
    assert_eq!(record["duration_s"], 0.0, "{record}");
    assert!(
        record["phases_s"]
            .as_object()
            .unwrap()
            .values()
            .all(|v| v == 0.0),
        "{record}"
    );
    assert!(
        record["provenance"]["started_at"]
            .as_str()
            .unwrap()
            .ends_with("T00:00:00Z"),
        "{record}"
    );
    // Model names are bounded (every submitter of the dataset sees them).
    let long = format!(
        "{{\"instance_id\": \"pdl_fixture_calc_001-v1\", \"model_name_or_path\": \"{}\", \"model_patch\": \"\"}}\n",
        "m".repeat(201)
    );
    let a = http(
        &addr,
        "POST",
        "/api/runs?dataset=fx",
        Some(&sam),
        long.as_bytes(),
    );
    assert_eq!(a.status, 400, "{}", String::from_utf8_lossy(&a.body));
    assert!(a.error().contains("longer than 200 bytes"), "{}", a.error());

    // A key sent where it does not belong (a path) is echoed and logged
    // redacted.
    let a = http(&addr, "GET", &format!("/api/runs/{sam}"), Some(&sam), b"");
    assert_eq!(a.status, 404);
    let a2 = http(&addr, "GET", &format!("/{admin}"), None, b"");
    // Percent-encoded, too.
    let a3 = http(
        &addr,
        "GET",
        &format!("/api/runs/pdlk%5F{}", &sam[5..]),
        Some(&sam),
        b"",
    );
    assert_eq!(a3.status, 404);
    // Other spellings: upper case, the bare digits.
    for spelled in [sam.to_ascii_uppercase(), sam[5..].to_string()] {
        let a = http(
            &addr,
            "GET",
            &format!("/api/runs/{spelled}"),
            Some(&sam),
            b"",
        );
        assert_eq!(a.status, 404);
        assert!(
            !String::from_utf8_lossy(&a.body).contains(&spelled[8..]),
            "{}",
            String::from_utf8_lossy(&a.body)
        );
    }
    // A key is no model name: every submitter of the dataset sees those.
    let named = format!(
        "{{\"instance_id\": \"pdl_fixture_calc_001-v1\", \"model_name_or_path\": \"{sam}\", \"model_patch\": \"\"}}\n"
    );
    let a = http(
        &addr,
        "POST",
        "/api/runs?dataset=fx",
        Some(&sam),
        named.as_bytes(),
    );
    assert_eq!(a.status, 400, "{}", String::from_utf8_lossy(&a.body));
    assert!(a.error().contains("looks like an API key"), "{}", a.error());
    assert!(!a.error().contains(&sam[5..]), "{}", a.error());
    for body in [&a.body, &a2.body] {
        let text = String::from_utf8_lossy(body);
        assert!(
            !text.contains(&sam[5..]) && !text.contains(&admin[5..]),
            "{text}"
        );
    }
    let log = service.log.clone();
    drop(service);
    let log = std::fs::read_to_string(log).unwrap();
    assert!(log.contains("pdlk_<redacted>"), "{log}");
    assert!(
        !log.contains(&sam[5..]) && !log.contains(&admin[5..]),
        "{log}"
    );
    assert!(!log.to_ascii_lowercase().contains(&sam[5..]), "{log}");
}

#[test]
fn quotas_hold_under_concurrent_requests_on_sqlite() {
    on_sqlite(quotas_hold_under_races);
}

#[test]
fn quotas_hold_under_concurrent_requests_on_postgresql() {
    on_postgresql(quotas_hold_under_races);
}

/// A ustar header for a regular file `name` of `size` bytes.
fn tar_header(name: &str, size: usize) -> Vec<u8> {
    let mut h = vec![0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000644");
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    h
}

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|p| p.join(name))
                    .find(|p| p.exists())
            })
        })
}

#[test]
fn the_web_page_shows_a_finished_runs_rewards_in_headless_chromium() {
    let _serial = serial();
    let Some(browser) = chromium() else {
        if skip_deps() {
            eprintln!("Chromium missing; skipped (PDL_SWE_SKIP_SERVICE_DEPS=1)");
            return;
        }
        panic!("Chromium is needed: apt-get install chromium (.ci/run does)");
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store {
        data_dir: dir.path().join("data"),
        database: None,
    };
    let admin = store.create_key("admin", "admin", &[]);
    let alice = store.create_key("alice", "submitter", &[]);
    let service = Service::start(&store, &[]);
    let tar = fixture_tar(dir.path());
    let out = cli(
        &[
            "datasets",
            "upload",
            "--server",
            &service.url,
            "--name",
            "fx",
            tar.to_str().unwrap(),
        ],
        Some(&admin),
    );
    assert!(out.status.success(), "{}", text(&out));
    let preds: String = fixtures()
        .join("predictions.jsonl")
        .to_str()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .unwrap()
        .lines()
        .take(3)
        .map(|l| format!("{l}\n"))
        .collect();
    let a = http(
        &service.addr,
        "POST",
        "/api/runs?dataset=fx",
        Some(&alice),
        preds.as_bytes(),
    );
    assert_eq!(a.status, 201);
    let run = a.json()["id"].as_str().unwrap().to_string();
    wait_finished(&service.addr, &alice, &run, Duration::from_secs(120));
    let report = http(
        &service.addr,
        "GET",
        &format!("/api/runs/{run}/report"),
        Some(&alice),
        b"",
    )
    .json();

    // Sign in through the fragment (never sent to the server) and open the run.
    let page = format!("{}/#key={alice}&run={run}", service.url);
    let profile = dir.path().join("profile");
    let base_args = |extra: &[String]| -> Output {
        Command::new(&browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--hide-scrollbars",
                "--virtual-time-budget=15000",
                "--window-size=1280,1000",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(&page)
            .output()
            .expect("chromium runs")
    };
    let out = base_args(&["--dump-dom".to_string()]);
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        dom.contains(&format!("data-run=\"{run}\"")),
        "the run did not open:\n{}\n{dom}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dom.contains("data-run-state=\"finished\""), "{dom}");
    for r in report["records"].as_array().unwrap() {
        let reward = r["reward"].as_f64().unwrap();
        assert!(
            dom.contains(&format!("data-reward=\"{reward}\"")),
            "reward {reward} not in the DOM:\n{dom}"
        );
        assert!(
            dom.contains(&format!(">{reward:.3}<")),
            "reward {reward:.3} not shown:\n{dom}"
        );
        assert!(dom.contains(r["model_name_or_path"].as_str().unwrap()));
    }
    assert!(!dom.contains(&alice), "the key stays out of the page");
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("service-web");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = shots.join("finished-run.png");
    let _ = std::fs::remove_file(&shot);
    let out = base_args(&[format!("--screenshot={}", shot.display())]);
    assert!(
        shot.exists() && std::fs::metadata(&shot).unwrap().len() > 1000,
        "no screenshot: {}",
        text(&out)
    );
}
