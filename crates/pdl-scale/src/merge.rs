//! Merging shard outputs ([`merge`]): `grade --shard` results files into one
//! results file, `run --shard` run folders into one run folder.
//!
//! The rules:
//!
//! 1. Every output must carry its shard manifest
//!    ([`ShardManifest`]: `<results>.shard.json`, `RUN_DIR/shard.json`), and
//!    all must be shards of one plan (the same command, shard count and plan
//!    digest).
//! 2. Every shard from 1 to N must be given: a missing shard is an error that
//!    names it. A shard given twice is merged like any duplicate (below).
//! 3. Every job a shard was assigned must have a record: a shard whose output
//!    lacks some (it is still running, or it stopped) is an error naming it
//!    and the count.
//! 4. Records are grouped by their resume key, computed from their fields
//!    ([`JobKey::of_record`]). A key recorded by two outputs is a duplicate:
//!    when their records are equal, timings and host details aside
//!    ([`comparable`]), one copy is kept with a warning; otherwise it is an
//!    error naming the key and both outputs. Several records of one key in
//!    one output (a campaign's re-run of a harness error) are kept as written.
//! 5. Records are written in plan order (the manifest's `plan`), each key's
//!    records in the order its shard wrote them; records of jobs outside the
//!    plan (an output that was resumed from an older file) follow, in the
//!    order read, with a warning. Lines are copied byte for byte.
//!
//! A merged run folder also gets every shard's `trajectories/`, `patches/`,
//! `logs/`, `ledger/` and `workspaces/` files (the same relative path in two
//! shards must hold the same bytes) and one `campaign.json`: the shards'
//! settings (which must agree), the earliest `started_at`, the latest
//! `resumed_at` and every shard's `episode_keys`. Nothing is overwritten: the
//! results file, or the run folder's `results.jsonl` and `campaign.json`,
//! must not exist yet; every file is created new, beneath the folder, without
//! following a link.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use pdl_fs::{Dir, EntryKind, FsError, OpenMode};
use pdl_grader::pipeline::shard::ManifestError;
use pdl_grader::pipeline::{JobKey, ShardManifest};
use pdl_grader::ResultRecord;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Folders of a run folder that hold per-episode files (copied by a merge).
pub const EPISODE_FOLDERS: &[&str] = &["trajectories", "patches", "logs", "ledger", "workspaces"];

/// The most bytes of one results file read.
const MAX_RESULTS_BYTES: u64 = 2 << 30;

/// What was merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeKind {
    /// `grade --shard` results files into one results file.
    Results,
    /// `run --shard` run folders into one run folder.
    RunFolder,
}

/// Why a merge cannot be done. Nothing is written when it fails before the
/// output is created.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// No shard output was named.
    #[error("name at least one shard output")]
    NoOutputs,
    /// An output (or a file in it) cannot be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file of a run folder cannot be used (a link, not a regular file).
    #[error(transparent)]
    File(#[from] FsError),
    /// A shard manifest cannot be read.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// An output has no shard manifest.
    #[error("{}: not a shard output (no {} beside it: was it written with --shard I/N?)", path.display(), manifest.display())]
    NotAShard {
        /// The output.
        path: PathBuf,
        /// Where its manifest should be.
        manifest: PathBuf,
    },
    /// Results files and run folders were mixed.
    #[error("{} and {} are not the same kind of output (a results file and a run folder)", first.display(), second.display())]
    MixedKinds {
        /// One output.
        first: PathBuf,
        /// Another.
        second: PathBuf,
    },
    /// Two outputs are shards of different plans.
    #[error("{} and {} are shards of different plans ({what})", first.display(), second.display())]
    DifferentPlans {
        /// One output.
        first: PathBuf,
        /// Another.
        second: PathBuf,
        /// How they differ.
        what: String,
    },
    /// Shards of the plan were not given.
    #[error("{}: no output of {} was given", missing_names(.missing, *.count), if .missing.len() == 1 { "it" } else { "theirs" })]
    MissingShards {
        /// The missing shards' numbers.
        missing: Vec<usize>,
        /// N.
        count: usize,
    },
    /// A shard's output lacks records of jobs it was assigned.
    #[error("shard {shard} ({}) is incomplete: {missing} of its {assigned} jobs have no record (the first: {first}); let it finish, or run it again with the same command", path.display())]
    Incomplete {
        /// The shard, `I/N`.
        shard: String,
        /// Its output.
        path: PathBuf,
        /// Jobs without a record.
        missing: usize,
        /// Jobs it was assigned.
        assigned: usize,
        /// The first job without a record.
        first: String,
    },
    /// Two outputs hold different records for one job.
    #[error("conflicting records for job {key}: {} and {} differ beyond timings and host details", first.display(), second.display())]
    Conflict {
        /// The job's key.
        key: String,
        /// One output.
        first: PathBuf,
        /// Another.
        second: PathBuf,
    },
    /// Two run folders hold different files at one path.
    #[error("conflicting files: {} and {} differ", first.display(), second.display())]
    FileConflict {
        /// One file.
        first: PathBuf,
        /// Another.
        second: PathBuf,
    },
    /// The merge would overwrite something.
    #[error("{} already exists; a merge writes a new results file (or a run folder without results.jsonl and campaign.json)", path.display())]
    OutputExists {
        /// What exists.
        path: PathBuf,
    },
}

fn missing_names(missing: &[usize], count: usize) -> String {
    let names: Vec<String> = missing.iter().map(|i| format!("{i}/{count}")).collect();
    match names.len() {
        1 => format!("shard {} is missing", names[0]),
        _ => format!("shards {} are missing", names.join(", ")),
    }
}

/// One record line of a shard output.
#[derive(Debug, Clone)]
struct Line {
    text: String,
    key: Option<String>,
}

/// One shard output, read.
#[derive(Debug)]
struct Output {
    path: PathBuf,
    manifest: ShardManifest,
    lines: Vec<Line>,
}

/// What a merge wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Merged {
    /// Results files or run folders.
    pub kind: MergeKind,
    /// The merged results file (the run folder's `results.jsonl`).
    pub results: PathBuf,
    /// N.
    pub shards: usize,
    /// Records written.
    pub records: usize,
    /// Of them, records of jobs outside the plan.
    pub outside_plan: usize,
    /// Duplicates kept once.
    pub duplicates: usize,
    /// Episode files copied (run folders).
    pub files: usize,
    /// What the user should know (duplicates, unreadable lines, records
    /// outside the plan).
    pub warnings: Vec<String>,
}

/// A record with its timings and host details removed: what must be equal
/// for two records of one job to be the same result (`duration_s`,
/// `phases_s`, `provenance.started_at`, `provenance.sandbox`, `job_key`,
/// `episode.wall_s`, and the local address of the gateway in
/// `episode.model_route.gateway`).
pub fn comparable(record: &Value) -> Value {
    let mut r = record.clone();
    if let Some(obj) = r.as_object_mut() {
        obj.remove("duration_s");
        obj.remove("phases_s");
        obj.remove("job_key");
        if let Some(p) = obj.get_mut("provenance").and_then(Value::as_object_mut) {
            p.remove("started_at");
            p.remove("sandbox");
        }
        if let Some(e) = obj.get_mut("episode").and_then(Value::as_object_mut) {
            e.remove("wall_s");
            if let Some(route) = e.get_mut("model_route").and_then(Value::as_object_mut) {
                route.remove("gateway");
            }
        }
    }
    r
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> MergeError + '_ {
    move |source| MergeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads the record lines of a results file; lines that are not records are
/// left out with a warning.
fn read_lines(path: &Path, warnings: &mut Vec<String>) -> Result<Vec<Line>, MergeError> {
    let mut file = pdl_fs::open_file_nofollow(path, OpenMode::Read)
        .map_err(|e| io(path)(std::io::Error::from(e)))?;
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_RESULTS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io(path))?;
    if bytes.len() as u64 > MAX_RESULTS_BYTES {
        return Err(io(path)(std::io::Error::other(format!(
            "larger than {MAX_RESULTS_BYTES} bytes"
        ))));
    }
    let mut lines = Vec::new();
    let complete = match bytes.iter().rposition(|b| *b == b'\n') {
        Some(i) => i + 1,
        None => 0,
    };
    if complete < bytes.len() && !bytes[complete..].trim_ascii().is_empty() {
        warnings.push(format!(
            "{}: a torn last line (a shard killed while writing) is left out",
            path.display()
        ));
    }
    for (i, raw) in bytes[..complete].split(|b| *b == b'\n').enumerate() {
        if raw.trim_ascii().is_empty() {
            continue;
        }
        let text = String::from_utf8_lossy(raw).into_owned();
        match serde_json::from_str::<ResultRecord>(&text) {
            Ok(record) => lines.push(Line {
                key: JobKey::of_record(&record).map(|k| k.as_str().to_string()),
                text,
            }),
            Err(e) => warnings.push(format!(
                "{}: line {}: not a result record ({e}); left out",
                path.display(),
                i + 1
            )),
        }
    }
    Ok(lines)
}

/// Reads one shard output: its manifest and its record lines.
fn read_output(path: &Path, warnings: &mut Vec<String>) -> Result<(Output, MergeKind), MergeError> {
    let meta = std::fs::symlink_metadata(path).map_err(io(path))?;
    let (kind, manifest_path, results) = if meta.is_dir() {
        (
            MergeKind::RunFolder,
            ShardManifest::path_for_run_dir(path),
            path.join("results.jsonl"),
        )
    } else {
        (
            MergeKind::Results,
            ShardManifest::path_for_results(path),
            path.to_path_buf(),
        )
    };
    let manifest = ShardManifest::read(&manifest_path)?.ok_or_else(|| MergeError::NotAShard {
        path: path.to_path_buf(),
        manifest: manifest_path.clone(),
    })?;
    let lines = match kind {
        MergeKind::RunFolder if !results.exists() => Vec::new(),
        _ => read_lines(&results, warnings)?,
    };
    Ok((
        Output {
            path: path.to_path_buf(),
            manifest,
            lines,
        },
        kind,
    ))
}

/// The merged record lines, in plan order, and what was seen on the way.
#[derive(Debug)]
struct Plan {
    kind: MergeKind,
    count: usize,
    lines: Vec<String>,
    outside_plan: usize,
    duplicates: usize,
    warnings: Vec<String>,
    outputs: Vec<Output>,
}

fn merge_records(paths: &[PathBuf]) -> Result<Plan, MergeError> {
    let mut warnings = Vec::new();
    let mut outputs = Vec::new();
    let mut kind = None;
    for path in paths {
        let (output, k) = read_output(path, &mut warnings)?;
        match kind {
            None => kind = Some(k),
            Some(first) if first != k => {
                return Err(MergeError::MixedKinds {
                    first: paths[0].clone(),
                    second: path.clone(),
                })
            }
            Some(_) => {}
        }
        outputs.push(output);
    }
    let kind = kind.ok_or(MergeError::NoOutputs)?;
    let first = &outputs[0];
    for other in &outputs[1..] {
        let (a, b) = (&first.manifest, &other.manifest);
        let what = if a.command != b.command {
            Some(format!("`{}` and `{}`", a.command, b.command))
        } else if a.shard.count != b.shard.count {
            Some(format!("{} and {} shards", a.shard.count, b.shard.count))
        } else if a.plan_digest != b.plan_digest {
            Some("other predictions, tasks, agents or samples".into())
        } else {
            None
        };
        if let Some(what) = what {
            return Err(MergeError::DifferentPlans {
                first: first.path.clone(),
                second: other.path.clone(),
                what,
            });
        }
    }
    let count = first.manifest.shard.count;
    let present: BTreeSet<usize> = outputs.iter().map(|o| o.manifest.shard.index).collect();
    let missing: Vec<usize> = (1..=count).filter(|i| !present.contains(i)).collect();
    if !missing.is_empty() {
        return Err(MergeError::MissingShards { missing, count });
    }

    // Each key's records, per output, in the order written.
    let mut by_key: BTreeMap<&str, Vec<(usize, Vec<&Line>)>> = BTreeMap::new();
    let mut unkeyed: Vec<&Line> = Vec::new();
    for (o, output) in outputs.iter().enumerate() {
        for line in &output.lines {
            let Some(key) = line.key.as_deref() else {
                unkeyed.push(line);
                continue;
            };
            let groups = by_key.entry(key).or_default();
            match groups.iter_mut().find(|(at, _)| *at == o) {
                Some((_, lines)) => lines.push(line),
                None => groups.push((o, vec![line])),
            }
        }
    }
    // Duplicates across outputs.
    let mut chosen: HashMap<&str, Vec<&Line>> = HashMap::new();
    let mut duplicates = 0;
    for (key, groups) in by_key {
        let mut groups = groups.into_iter();
        let (first_at, first_lines) = groups.next().expect("a key has records");
        let seen: Vec<Value> = first_lines.iter().map(|l| comparable_line(l)).collect();
        for (at, lines) in groups {
            let other: Vec<Value> = lines.iter().map(|l| comparable_line(l)).collect();
            if other != seen {
                return Err(MergeError::Conflict {
                    key: key.to_string(),
                    first: outputs[first_at].path.clone(),
                    second: outputs[at].path.clone(),
                });
            }
            duplicates += 1;
            warnings.push(format!(
                "job {key} is recorded by both {} and {}, identically (timings aside); kept once",
                outputs[first_at].path.display(),
                outputs[at].path.display()
            ));
        }
        chosen.insert(key, first_lines);
    }
    // Completeness: every assigned job of every shard has a record.
    for output in &outputs {
        let lacking: Vec<&String> = output
            .manifest
            .assigned
            .iter()
            .filter(|k| !chosen.contains_key(k.as_str()))
            .collect();
        if let Some(first) = lacking.first() {
            return Err(MergeError::Incomplete {
                shard: output.manifest.shard.to_string(),
                path: output.path.clone(),
                missing: lacking.len(),
                assigned: output.manifest.assigned.len(),
                first: (*first).clone(),
            });
        }
    }
    // Plan order, then what lies outside the plan.
    let mut lines = Vec::new();
    let mut written: BTreeSet<&str> = BTreeSet::new();
    for key in &first.manifest.plan {
        if !written.insert(key.as_str()) {
            continue;
        }
        if let Some(records) = chosen.get(key.as_str()) {
            lines.extend(records.iter().map(|l| l.text.clone()));
        }
    }
    let mut outside_plan = 0;
    for output in &outputs {
        for line in &output.lines {
            let Some(key) = line.key.as_deref() else {
                continue;
            };
            if written.contains(key) {
                continue;
            }
            if let Some(records) = chosen.get(key) {
                if records.iter().any(|l| std::ptr::eq(*l, line)) {
                    lines.push(line.text.clone());
                    outside_plan += 1;
                }
            }
        }
    }
    for line in unkeyed {
        lines.push(line.text.clone());
        outside_plan += 1;
    }
    if outside_plan > 0 {
        warnings.push(format!(
            "{outside_plan} records belong to no job of the plan (an output resumed from an older file?); kept after the plan's records"
        ));
    }
    Ok(Plan {
        kind,
        count,
        lines,
        outside_plan,
        duplicates,
        warnings,
        outputs,
    })
}

fn comparable_line(line: &Line) -> Value {
    serde_json::from_str::<Value>(&line.text)
        .map(|v| comparable(&v))
        .unwrap_or(Value::Null)
}

/// Writes `lines` as a new results file at `path` (mode 0600; an existing
/// file, or a link, is refused).
fn write_results(path: &Path, lines: &[String]) -> Result<(), MergeError> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(MergeError::OutputExists {
            path: path.to_path_buf(),
        });
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    let mut file = pdl_fs::open_file_nofollow(path, OpenMode::CreateNew)
        .map_err(|e| io(path)(std::io::Error::from(e)))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io(path))?;
    let mut text = String::new();
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io(path))
}

/// Merges the shard outputs `shards` into `out`: results files into the
/// results file `out`, run folders into the run folder `out` (see the module
/// docs for the rules).
pub fn merge(out: &Path, shards: &[PathBuf]) -> Result<Merged, MergeError> {
    if shards.is_empty() {
        return Err(MergeError::NoOutputs);
    }
    let plan = merge_records(shards)?;
    match plan.kind {
        MergeKind::Results => {
            write_results(out, &plan.lines)?;
            Ok(Merged {
                kind: plan.kind,
                results: out.to_path_buf(),
                shards: plan.count,
                records: plan.lines.len(),
                outside_plan: plan.outside_plan,
                duplicates: plan.duplicates,
                files: 0,
                warnings: plan.warnings,
            })
        }
        MergeKind::RunFolder => merge_run_folders(out, plan),
    }
}

fn merge_run_folders(out: &Path, plan: Plan) -> Result<Merged, MergeError> {
    use std::os::unix::fs::PermissionsExt;
    for name in ["results.jsonl", "campaign.json"] {
        let path = out.join(name);
        if std::fs::symlink_metadata(&path).is_ok() {
            return Err(MergeError::OutputExists { path });
        }
    }
    // The campaign's settings, from every shard (they must agree).
    let campaign = merged_campaign(&plan.outputs)?;
    std::fs::create_dir_all(out).map_err(io(out))?;
    std::fs::set_permissions(out, std::fs::Permissions::from_mode(0o700)).map_err(io(out))?;
    let dir = Dir::open(out)?;
    let mut files = 0;
    let mut origin: HashMap<PathBuf, PathBuf> = HashMap::new();
    for output in &plan.outputs {
        let source = Dir::open(&output.path)?;
        for name in EPISODE_FOLDERS {
            match source.entry(Path::new(name))? {
                None => continue,
                Some(EntryKind::Dir) => {}
                Some(_) => {
                    return Err(FsError {
                        path: output.path.join(name),
                        kind: pdl_fs::FsErrorKind::WrongType {
                            found: "file or link",
                            wanted: "directory",
                        },
                    }
                    .into())
                }
            }
            let from = source.open_dir(Path::new(name), false)?;
            let to = dir.open_dir(Path::new(name), true)?;
            to.set_mode(0o700)?;
            files += copy_tree(&from, &to, Path::new(""), &mut origin)?;
        }
    }
    if let Some(campaign) = campaign {
        let bytes = serde_json::to_vec_pretty(&campaign).expect("JSON serializes");
        let mut file = dir.open_file(Path::new("campaign.json"), OpenMode::CreateNew)?;
        std::io::Write::write_all(&mut file, &bytes).map_err(io(&out.join("campaign.json")))?;
    }
    let results = out.join("results.jsonl");
    write_results(&results, &plan.lines)?;
    Ok(Merged {
        kind: plan.kind,
        results,
        shards: plan.count,
        records: plan.lines.len(),
        outside_plan: plan.outside_plan,
        duplicates: plan.duplicates,
        files,
        warnings: plan.warnings,
    })
}

/// Copies every regular file beneath `from` into `to` (created new); a file
/// already there from another shard must hold the same bytes.
fn copy_tree(
    from: &Dir,
    to: &Dir,
    rel: &Path,
    origin: &mut HashMap<PathBuf, PathBuf>,
) -> Result<usize, MergeError> {
    let listed = if rel.as_os_str().is_empty() {
        from.list()?
    } else {
        from.open_dir(rel, false)?.list()?
    };
    let mut copied = 0;
    for (name, kind) in listed {
        let path = rel.join(&name);
        match kind {
            EntryKind::Dir => {
                let made = to.open_dir(&path, true)?;
                let _ = made.set_mode(0o700);
                copied += copy_tree(from, to, &path, origin)?;
            }
            EntryKind::File(_) => {
                let source_path = from.display_path(&path);
                match to.entry(&path)? {
                    Some(EntryKind::File(_)) => {
                        if digest_of(from, &path)? != digest_of(to, &path)? {
                            return Err(MergeError::FileConflict {
                                first: origin
                                    .get(&path)
                                    .cloned()
                                    .unwrap_or_else(|| to.display_path(&path)),
                                second: source_path,
                            });
                        }
                    }
                    Some(_) => {
                        return Err(FsError {
                            path: to.display_path(&path),
                            kind: pdl_fs::FsErrorKind::WrongType {
                                found: "directory or link",
                                wanted: "regular file",
                            },
                        }
                        .into())
                    }
                    None => {
                        let mut reader = from.open_file(&path, OpenMode::Read)?;
                        let mut writer = to.open_file(&path, OpenMode::CreateNew)?;
                        std::io::copy(&mut reader, &mut writer).map_err(io(&source_path))?;
                        origin.insert(path, source_path);
                        copied += 1;
                    }
                }
            }
            EntryKind::Symlink | EntryKind::Other => {
                return Err(FsError {
                    path: from.display_path(&path),
                    kind: pdl_fs::FsErrorKind::WrongType {
                        found: if kind == EntryKind::Symlink {
                            "symbolic link"
                        } else {
                            "special file"
                        },
                        wanted: "regular file",
                    },
                }
                .into())
            }
        }
    }
    Ok(copied)
}

fn digest_of(dir: &Dir, rel: &Path) -> Result<String, MergeError> {
    let mut file = dir.open_file(rel, OpenMode::Read)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(io(&dir.display_path(rel)))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// The settings every shard's `campaign.json` must agree on.
const CAMPAIGN_SETTINGS: &[&str] = &[
    "harness_version",
    "dataset",
    "model",
    "api",
    "base_url",
    "agents",
    "samples",
    "tasks",
    "allowed_provider_tools",
];

fn merged_campaign(outputs: &[Output]) -> Result<Option<Value>, MergeError> {
    let mut merged: Option<(PathBuf, Value)> = None;
    let mut keys: BTreeSet<String> = BTreeSet::new();
    let mut started: Option<String> = None;
    let mut resumed: Option<String> = None;
    for output in outputs {
        let path = output.path.join("campaign.json");
        let dir = Dir::open(&output.path)?;
        let Some(bytes) = dir.read(Path::new("campaign.json"), 64 << 20)? else {
            continue;
        };
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| io(&path)(std::io::Error::other(e.to_string())))?;
        for k in value
            .get("episode_keys")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(k) = k.as_str() {
                keys.insert(k.to_string());
            }
        }
        let text = |name: &str| value.get(name).and_then(Value::as_str).map(str::to_string);
        if let Some(s) = text("started_at") {
            started = Some(started.map_or(s.clone(), |t: String| t.min(s)));
        }
        if let Some(s) = text("resumed_at") {
            resumed = Some(resumed.map_or(s.clone(), |t: String| t.max(s)));
        }
        match &merged {
            None => merged = Some((path, value)),
            Some((first, seen)) => {
                for name in CAMPAIGN_SETTINGS {
                    if seen.get(name) != value.get(name) {
                        return Err(MergeError::DifferentPlans {
                            first: first.clone(),
                            second: path,
                            what: format!("their `{name}` differ"),
                        });
                    }
                }
            }
        }
    }
    let Some((_, mut value)) = merged else {
        return Ok(None);
    };
    if let Some(obj) = value.as_object_mut() {
        if let Some(s) = started {
            obj.insert("started_at".into(), Value::String(s));
        }
        if let Some(s) = resumed {
            obj.insert("resumed_at".into(), Value::String(s));
        }
        obj.insert(
            "episode_keys".into(),
            Value::Array(keys.into_iter().map(Value::String).collect()),
        );
        obj.insert(
            "merged_from".into(),
            Value::Array(
                outputs
                    .iter()
                    .map(|o| {
                        serde_json::json!({
                            "shard": o.manifest.shard.to_string(),
                            "path": o.path.display().to_string(),
                        })
                    })
                    .collect(),
            ),
        );
    }
    Ok(Some(value))
}

#[cfg(test)]
mod tests;
