//! Datasets ([`Dataset`]): a set of tasks loaded from a task-tree folder, a JSONL
//! file or a Parquet file, with every task that could not be loaded kept as an
//! error beside the ones that could.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::diff::parse_patch;
use crate::error::{LoadError, WriteError};
use crate::jsonl::{parse_jsonl_bytes, write_jsonl};
use crate::parquet_io::{parse_parquet, write_parquet};
use crate::safe::{
    check_name, check_repo_path, check_yaml_bounds, MAX_DATASET_FILE_BYTES, MAX_TEST_TIMEOUT_S,
};
use crate::task::{Task, HIDDEN_DIR};
use crate::tree::{read_tree_dir, task_from_tree, write_tree_beneath, TreeFiles, MANIFEST};

/// The three forms of a dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatasetFormat {
    /// A task-tree folder (one task, or a folder of tasks).
    Tree,
    /// One JSON object per line.
    Jsonl,
    /// Apache Parquet.
    Parquet,
}

impl DatasetFormat {
    /// The format a path names: `.parquet`, `.jsonl` (or `.ndjson`), else a
    /// folder. `.json` names none: a JSON document is not one of the forms, and
    /// writing a folder of task trees under that name would mislead.
    pub fn of_path(path: &Path) -> Option<DatasetFormat> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("parquet") => Some(DatasetFormat::Parquet),
            Some("jsonl") | Some("ndjson") => Some(DatasetFormat::Jsonl),
            Some("json") => None,
            Some(_) if path.is_file() => None,
            _ => Some(DatasetFormat::Tree),
        }
    }
}

/// Tasks loaded from one source, and the ones that failed to load.
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    /// Where the tasks came from (a path, or `bundled open suite`).
    pub source: String,
    /// The tasks that loaded, in source order.
    pub tasks: Vec<Task>,
    /// One error per task or row that did not load.
    pub errors: Vec<LoadError>,
    /// Things that did not stop a task from loading but were dropped or
    /// ignored (unreadable Parquet extras metadata).
    pub warnings: Vec<LoadError>,
}

/// The first thing about a task that the harness cannot safely use on the
/// host, as `(field, message)`: unsafe names, unsafe or repeated `files`
/// paths, hidden-test paths of `test_patch` that are unsafe or outside
/// `tests/hidden/`, unsafe rung names, an unbounded test timeout, a verbatim
/// manifest too large or too deep to parse.
pub fn check_task(task: &Task) -> Result<(), (String, String)> {
    let row = &task.row;
    for (field, value) in [("task_id", &row.task_id), ("instance_id", &row.instance_id)] {
        check_name(value)
            .map_err(|why| (field.to_string(), format!("unsafe name `{value}`: {why}")))?;
    }
    let mut seen = HashSet::new();
    for f in &row.files {
        check_repo_path(&f.path).map_err(|why| {
            (
                "files".to_string(),
                format!("unsafe path `{}`: {why}", f.path),
            )
        })?;
        if !seen.insert(f.path.as_str()) {
            return Err(("files".into(), format!("`{}` appears twice", f.path)));
        }
        // The repository an agent sees may not hold the hidden tests' folder:
        // what is there comes from test_patch, at grading time only.
        if f.path.starts_with(HIDDEN_DIR) {
            return Err((
                "files".into(),
                format!(
                    "`{}` lies in {HIDDEN_DIR}, where only test_patch may put files",
                    f.path
                ),
            ));
        }
    }
    // A test_patch that is not a diff at all is reported by validation (and
    // refused by the grader); every path one names must be safe here.
    if let Ok(set) = parse_patch(&row.test_patch) {
        for section in &set.files {
            for path in section.touched_paths() {
                check_repo_path(path).map_err(|why| {
                    (
                        "test_patch".to_string(),
                        format!("unsafe path `{path}`: {why}"),
                    )
                })?;
                if path.len() <= HIDDEN_DIR.len() || !path.starts_with(HIDDEN_DIR) {
                    return Err((
                        "test_patch".into(),
                        format!("`{path}` is not under {HIDDEN_DIR}"),
                    ));
                }
            }
        }
    }
    for rung in &task.extras.ladder {
        check_name(&rung.name).map_err(|why| {
            (
                "ladder".to_string(),
                format!("unsafe rung name `{}`: {why}", rung.name),
            )
        })?;
    }
    if let Some(seconds) = task.extras.limits.test_timeout_s {
        if !(1..=MAX_TEST_TIMEOUT_S).contains(&seconds) {
            return Err((
                "limits.test_timeout_s".into(),
                format!("{seconds} is out of range (1 to {MAX_TEST_TIMEOUT_S} seconds)"),
            ));
        }
    }
    if let Some(text) = &task.extras.manifest_yaml {
        check_yaml_bounds(text).map_err(|why| ("manifest_yaml".to_string(), why))?;
    }
    // An external agent gets the issue in one environment variable, and Linux
    // refuses to start a program with a variable over 128 KiB: a longer issue
    // would fail every agent and be blamed on it.
    if task.row.problem_statement.len() > MAX_PROBLEM_STATEMENT_BYTES {
        return Err((
            "problem_statement".into(),
            format!(
                "{} bytes, over the bound of {MAX_PROBLEM_STATEMENT_BYTES} (agents receive it in one environment variable)",
                task.row.problem_statement.len()
            ),
        ));
    }
    Ok(())
}

/// The longest issue text a task may have.
pub const MAX_PROBLEM_STATEMENT_BYTES: usize = 64 << 10;

impl Dataset {
    /// Builds a dataset, moving rows with unsafe files and repeated instance IDs
    /// into `errors` (the first occurrence of an ID is kept).
    pub fn new(source: impl Into<String>, tasks: Vec<Task>, mut errors: Vec<LoadError>) -> Self {
        let source = source.into();
        let mut kept = Vec::new();
        let mut first_seen: HashMap<String, usize> = HashMap::new();
        for (index, task) in tasks.into_iter().enumerate() {
            if let Err((field, message)) = check_task(&task) {
                errors.push(
                    LoadError::source(&source, message)
                        .for_instance(Some(task.id()))
                        .in_field(field),
                );
                continue;
            }
            if let Some(first) = first_seen.get(task.id()) {
                errors.push(
                    LoadError::source(
                        &source,
                        format!(
                            "duplicate instance_id (task {} repeats task {}; the first is kept)",
                            index + 1,
                            first + 1
                        ),
                    )
                    .for_instance(Some(task.id()))
                    .in_field("instance_id"),
                );
                continue;
            }
            first_seen.insert(task.id().to_string(), index);
            kept.push(task);
        }
        Dataset {
            source,
            tasks: kept,
            errors,
            warnings: Vec::new(),
        }
    }

    /// Loads task trees from memory: `(name, files)` pairs, one per task.
    pub fn from_trees<'a>(
        source: &str,
        trees: impl IntoIterator<Item = (String, &'a TreeFiles)>,
    ) -> Self {
        let mut tasks = Vec::new();
        let mut errors = Vec::new();
        for (name, files) in trees {
            match task_from_tree(files, &name) {
                Ok(t) => tasks.push(t),
                Err(e) => errors.push(e),
            }
        }
        Dataset::new(source, tasks, errors)
    }

    /// Loads a dataset from a path. Fails only when the path itself cannot be read;
    /// bad tasks inside it are kept in `errors`.
    pub fn load(path: &Path) -> Result<Dataset, LoadError> {
        let name = path.display().to_string();
        let format = DatasetFormat::of_path(path).ok_or_else(|| {
            LoadError::source(
                &name,
                "unknown dataset format (use a .parquet or .jsonl file, or a task-tree folder)",
            )
        })?;
        match format {
            DatasetFormat::Parquet | DatasetFormat::Jsonl => {
                let bytes = read_dataset_file(path, &name)?;
                if format == DatasetFormat::Parquet {
                    let parsed = parse_parquet(bytes, &name);
                    let mut dataset = Dataset::new(name, parsed.tasks, parsed.errors);
                    dataset.warnings = parsed.warnings;
                    Ok(dataset)
                } else {
                    let (tasks, errors) = parse_jsonl_bytes(&bytes, &name);
                    Ok(Dataset::new(name, tasks, errors))
                }
            }
            DatasetFormat::Tree => load_tree_folder(path, name),
        }
    }

    /// Keeps only the tasks whose task ID or instance ID is in `ids`; returns the
    /// IDs that matched nothing.
    pub fn retain_ids(&mut self, ids: &[String]) -> Vec<String> {
        if ids.is_empty() {
            return Vec::new();
        }
        let unknown = ids
            .iter()
            .filter(|id| {
                !self
                    .tasks
                    .iter()
                    .any(|t| &t.row.task_id == *id || &t.row.instance_id == *id)
            })
            .cloned()
            .collect();
        self.tasks.retain(|t| {
            ids.iter()
                .any(|id| *id == t.row.task_id || *id == t.row.instance_id)
        });
        unknown
    }

    /// The task with this instance ID.
    pub fn get(&self, instance_id: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.row.instance_id == instance_id)
    }
}

/// Reads a JSONL or Parquet file: a regular file (a link to one is followed:
/// the user named it), at most [`MAX_DATASET_FILE_BYTES`].
fn read_dataset_file(path: &Path, name: &str) -> Result<Vec<u8>, LoadError> {
    use std::io::Read;
    let meta = std::fs::metadata(path).map_err(|e| LoadError::source(name, e.to_string()))?;
    if !meta.is_file() {
        return Err(LoadError::source(name, "not a regular file"));
    }
    if meta.len() > MAX_DATASET_FILE_BYTES {
        return Err(LoadError::source(
            name,
            format!(
                "{} bytes; a dataset file may hold at most {MAX_DATASET_FILE_BYTES}",
                meta.len()
            ),
        ));
    }
    let file = std::fs::File::open(path).map_err(|e| LoadError::source(name, e.to_string()))?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_DATASET_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| LoadError::source(name, e.to_string()))?;
    if bytes.len() as u64 > MAX_DATASET_FILE_BYTES {
        return Err(LoadError::source(
            name,
            "the file grew past the bound while read",
        ));
    }
    Ok(bytes)
}

/// True when `dir` holds a `manifest.yaml` of any kind (a FIFO or a link
/// there is the task's defect, named when the task is read, never skipped).
fn has_manifest(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join(MANIFEST)).is_ok()
}

/// Loads a task folder, or a folder of task folders.
fn load_tree_folder(path: &Path, name: String) -> Result<Dataset, LoadError> {
    if !path.is_dir() {
        return Err(LoadError::source(&name, "no such file or folder"));
    }
    if has_manifest(path) {
        let (tasks, errors) =
            match read_tree_dir(path).and_then(|files| task_from_tree(&files, &name)) {
                Ok(t) => (vec![t], vec![]),
                Err(e) => (vec![], vec![e]),
            };
        return Ok(Dataset::new(name, tasks, errors));
    }
    let mut dirs = Vec::new();
    let mut errors = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| LoadError::source(&name, e.to_string()))? {
        let entry = entry.map_err(|e| LoadError::source(&name, e.to_string()))?;
        let child = entry.path();
        // The entry's own type, never a link's target.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_symlink() {
            if std::fs::metadata(&child).is_ok_and(|m| m.is_dir()) {
                errors.push(LoadError::source(
                    child.display().to_string(),
                    "a symbolic link to a folder; links are not followed in a dataset",
                ));
            }
            continue;
        }
        if kind.is_dir() && has_manifest(&child) {
            dirs.push(child);
        }
    }
    dirs.sort();
    if dirs.is_empty() && errors.is_empty() {
        return Err(LoadError::source(
            &name,
            "no task found (a task folder holds manifest.yaml)",
        ));
    }
    let mut tasks = Vec::new();
    for dir in dirs {
        let dir_name = dir.display().to_string();
        match read_tree_dir(&dir).and_then(|files| task_from_tree(&files, &dir_name)) {
            Ok(t) => tasks.push(t),
            Err(e) => errors.push(e),
        }
    }
    Ok(Dataset::new(name, tasks, errors))
}

/// Writes tasks to `path` in the format its name calls for: `.parquet`, `.jsonl`,
/// or otherwise a folder with one task tree per task (named by task ID).
///
/// A file is replaced, but never through a symbolic link at its path. In a
/// folder, each task gets a new folder `<path>/<task_id>`: one that already
/// exists and is not empty is an error naming it (nothing in it is touched),
/// and every file is created new, beneath the folder, without following a
/// link. Each task that cannot be written is its own error; the others are
/// still written.
pub fn write_dataset(tasks: &[Task], path: &Path) -> Result<(), Vec<WriteError>> {
    match DatasetFormat::of_path(path) {
        Some(DatasetFormat::Parquet) => write_parquet(tasks, path).map_err(|e| vec![e]),
        Some(DatasetFormat::Jsonl) => write_jsonl(tasks, path).map_err(|e| vec![e]),
        Some(DatasetFormat::Tree) => {
            let root = pdl_fs::Dir::create(path).map_err(|e| vec![WriteError::fs(e)])?;
            let errors: Vec<WriteError> = tasks
                .iter()
                .filter_map(|task| write_tree_beneath(task, &root).err())
                .collect();
            if errors.is_empty() {
                Ok(())
            } else {
                Err(errors)
            }
        }
        None => Err(vec![WriteError::UnknownFormat(path.to_path_buf())]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::render_added_file;
    use crate::row::{InstanceRow, RepoFile};
    use crate::task::TaskExtras;

    fn task(id: &str) -> Task {
        Task {
            row: InstanceRow {
                instance_id: format!("{id}-v1"),
                task_id: id.into(),
                task_version: 1,
                tier: "T1".into(),
                domain: "d".into(),
                problem_statement: "p".into(),
                patch: String::new(),
                test_patch: render_added_file(
                    "tests/hidden/test_h.py",
                    "def test_h():\n    pass\n",
                ),
                fail_to_pass: vec!["tests/hidden/test_h.py::test_h".into()],
                pass_to_pass: vec![],
                files: vec![RepoFile {
                    path: "src/a.py".into(),
                    content: "x\n".into(),
                }],
                patch_policy_allowed: vec!["src/**".into()],
                patch_policy_forbidden: vec![],
                token_budget: 1,
                hidden_test_count: 1,
                public_test_count: 0,
                graded_ladder_rungs: vec![],
                reward_formula: "1*build_health".into(),
            },
            extras: TaskExtras::default(),
        }
    }

    #[test]
    fn a_json_destination_is_refused_rather_than_written_as_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suite.json");
        let errors = write_dataset(&[task("a")], &path).unwrap_err();
        assert!(
            matches!(errors[..], [WriteError::UnknownFormat(_)]),
            "{errors:?}"
        );
        assert!(!path.exists());
        assert_eq!(
            DatasetFormat::of_path(Path::new("x.jsonl")),
            Some(DatasetFormat::Jsonl)
        );
        assert_eq!(DatasetFormat::of_path(Path::new("x.json")), None);
        assert_eq!(
            DatasetFormat::of_path(Path::new("suite")),
            Some(DatasetFormat::Tree)
        );
    }

    /// Each case: a change to a healthy task, the field named, and a part of
    /// the message. Every bad task is refused, the healthy one beside it kept.
    #[test]
    fn unsafe_names_paths_and_limits_are_task_defects() {
        type Change = fn(&mut Task);
        let cases: Vec<(&str, Change, &str, &str)> = vec![
            (
                "task_id traversal",
                |t| t.row.task_id = "../../tmp/rt_victim".into(),
                "task_id",
                "unsafe name",
            ),
            (
                "task_id absolute",
                |t| t.row.task_id = "/tmp/rt_abs".into(),
                "task_id",
                "unsafe name",
            ),
            (
                "task_id dot",
                |t| t.row.task_id = "..".into(),
                "task_id",
                "unsafe name",
            ),
            (
                "instance_id slash",
                |t| t.row.instance_id = "a/b-v1".into(),
                "instance_id",
                "unsafe name",
            ),
            (
                "hidden traversal",
                |t| {
                    t.row.test_patch = render_added_file(
                        &format!("tests/hidden/{}root/zz.pth", "../".repeat(40)),
                        "import os\n",
                    )
                },
                "test_patch",
                "unsafe path",
            ),
            (
                "hidden absolute",
                |t| t.row.test_patch = render_added_file("/tmp/x.py", "x\n"),
                "test_patch",
                "unsafe path",
            ),
            (
                "hidden .git",
                |t| t.row.test_patch = render_added_file("tests/hidden/.git/config", "x\n"),
                "test_patch",
                "`.git`",
            ),
            (
                "hidden control",
                |t| t.row.test_patch = render_added_file("tests/hidden/a\u{1b}b.py", "x\n"),
                "test_patch",
                "control",
            ),
            (
                "hidden outside",
                |t| t.row.test_patch = render_added_file("src/evil.py", "x\n"),
                "test_patch",
                "not under tests/hidden/",
            ),
            (
                "hidden long component",
                |t| {
                    t.row.test_patch =
                        render_added_file(&format!("tests/hidden/{}.py", "a".repeat(300)), "x\n")
                },
                "test_patch",
                "component",
            ),
            (
                "files .git",
                |t| t.row.files[0].path = ".git/config".into(),
                "files",
                "`.git`",
            ),
            (
                "files nested .git",
                |t| t.row.files[0].path = "sub/.Git/info/attributes".into(),
                "files",
                "`.git`",
            ),
            (
                "files NUL",
                |t| t.row.files[0].path = "a\0b".into(),
                "files",
                "control",
            ),
            (
                "files too long",
                |t| t.row.files[0].path = "ab/".repeat(400) + "x",
                "files",
                "1024",
            ),
            (
                "rung name",
                |t| {
                    t.extras.ladder.push(crate::task::LadderRung {
                        name: "../x.diff".into(),
                        reward: 0.5,
                        note: String::new(),
                        diff: String::new(),
                    })
                },
                "ladder",
                "unsafe rung name",
            ),
            (
                "timeout huge",
                |t| t.extras.limits.test_timeout_s = Some(i64::MAX as u64),
                "limits.test_timeout_s",
                "out of range",
            ),
            (
                "timeout max",
                |t| t.extras.limits.test_timeout_s = Some(u64::MAX),
                "limits.test_timeout_s",
                "out of range",
            ),
            (
                "timeout zero",
                |t| t.extras.limits.test_timeout_s = Some(0),
                "limits.test_timeout_s",
                "out of range",
            ),
            (
                "a file in the hidden tests' folder",
                |t| {
                    t.row.files.push(RepoFile {
                        path: "tests/hidden/test_peek.py".into(),
                        content: "def test_x():\n    pass\n".into(),
                    })
                },
                "files",
                "only test_patch",
            ),
            (
                "issue too long",
                |t| t.row.problem_statement = "x".repeat(MAX_PROBLEM_STATEMENT_BYTES + 1),
                "problem_statement",
                "over the bound",
            ),
            (
                "deep manifest",
                |t| t.extras.manifest_yaml = Some(format!("deep: {}\n", "[".repeat(100_000))),
                "manifest_yaml",
                "nested",
            ),
        ];
        for (name, change, field, message) in cases {
            let mut bad = task("bad");
            change(&mut bad);
            let ds = Dataset::new("d.jsonl", vec![bad, task("good")], vec![]);
            assert_eq!(ds.tasks.len(), 1, "{name}");
            assert_eq!(ds.tasks[0].row.task_id, "good", "{name}");
            assert_eq!(ds.errors.len(), 1, "{name}");
            let e = &ds.errors[0];
            assert_eq!(e.field.as_deref(), Some(field), "{name}: {e}");
            assert!(e.message.contains(message), "{name}: {e}");
        }
        let mut ok = task("edge");
        ok.extras.limits.test_timeout_s = Some(MAX_TEST_TIMEOUT_S);
        ok.row.files[0].path = ".gitignore".into();
        assert!(check_task(&ok).is_ok());
    }

    #[test]
    fn special_files_links_and_big_files_in_a_tree_are_named() {
        use std::os::unix::fs::symlink;
        let good = task("good");
        let tmp = tempfile::tempdir().unwrap();
        let root = pdl_fs::Dir::open(tmp.path()).unwrap();
        crate::tree::write_tree_beneath(&good, &root).unwrap();
        let make = |name: &str, extra: &dyn Fn(&Path)| {
            let mut t = task(name);
            t.row.instance_id = format!("{name}-v1");
            crate::tree::write_tree_beneath(&t, &root).unwrap();
            extra(&tmp.path().join(name));
        };
        let fifo = |p: &Path| {
            rustix_mkfifo(p);
        };
        make("fifo_fixture", &|d: &Path| {
            fifo(&d.join("fixtures/src/pipe.py"))
        });
        make("fifo_manifest", &|d: &Path| {
            std::fs::remove_file(d.join(MANIFEST)).unwrap();
            fifo(&d.join(MANIFEST));
        });
        make("link_fixture", &|d: &Path| {
            symlink("/etc/passwd", d.join("fixtures/src/l.py")).unwrap()
        });
        make("sparse", &|d: &Path| {
            let f = std::fs::File::create(d.join("fixtures/src/data.py")).unwrap();
            f.set_len(3 << 30).unwrap();
        });
        make("many_files", &|d: &Path| {
            for i in 0..9 {
                std::fs::write(
                    d.join(format!("fixtures/src/big{i}.py")),
                    vec![b'a'; 8 << 20],
                )
                .unwrap();
            }
        });
        symlink(tmp.path().join("good"), tmp.path().join("linked_task")).unwrap();
        let ds = Dataset::load(tmp.path()).unwrap();
        let ids: Vec<&str> = ds.tasks.iter().map(|t| t.row.task_id.as_str()).collect();
        assert_eq!(ids, ["good"], "{:#?}", ds.errors);
        let shown: Vec<String> = ds.errors.iter().map(ToString::to_string).collect();
        let expect = [
            ("fifo_fixture", "`fixtures/src/pipe.py`: a FIFO"),
            ("fifo_manifest", "`manifest.yaml`: a FIFO"),
            ("link_fixture", "`fixtures/src/l.py`: a symbolic link"),
            ("sparse", "`fixtures/src/data.py`: 3221225472 bytes"),
            ("many_files", "more than 67108864 bytes in all"),
            ("linked_task", "a symbolic link to a folder"),
        ];
        assert_eq!(shown.len(), expect.len(), "{shown:#?}");
        for (task, text) in expect {
            assert!(
                shown.iter().any(|s| s.contains(task) && s.contains(text)),
                "{task}: {text} not in {shown:#?}"
            );
        }
    }

    fn rustix_mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn export_to_a_folder_never_leaves_it_or_overwrites() {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("out");
        let victim = tmp.path().join("victim");
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::write(victim.join("manifest.yaml"), "keep").unwrap();
        let mut escaping = task("x");
        escaping.row.task_id = "../victim".into();
        let mut absolute = task("y");
        absolute.row.task_id = victim.display().to_string();
        let errors = write_dataset(&[escaping, absolute, task("good")], &dest).unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors.iter().all(|e| e.to_string().contains("unsafe name")));
        assert_eq!(
            std::fs::read_to_string(victim.join("manifest.yaml")).unwrap(),
            "keep"
        );
        assert!(dest.join("good/manifest.yaml").is_file());
        // A second export refuses the existing task folder.
        let errors = write_dataset(&[task("good")], &dest).unwrap_err();
        assert!(
            errors[0].to_string().contains("already exists"),
            "{errors:?}"
        );
        // A link planted inside a task folder is not followed.
        std::fs::create_dir(dest.join("linked")).unwrap();
        std::os::unix::fs::symlink(&victim, dest.join("linked/fixtures")).unwrap();
        let errors = write_dataset(&[task("linked")], &dest).unwrap_err();
        assert!(
            errors[0].to_string().contains("already exists"),
            "{errors:?}"
        );
        std::fs::remove_file(dest.join("linked/fixtures")).unwrap();
        std::fs::remove_dir(dest.join("linked")).unwrap();
        std::os::unix::fs::symlink(&victim, dest.join("linked")).unwrap();
        let errors = write_dataset(&[task("linked")], &dest).unwrap_err();
        assert!(
            errors[0].to_string().contains("symbolic link"),
            "{errors:?}"
        );
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 1);
        // A file format is replaced, never written through a link.
        std::os::unix::fs::symlink(victim.join("manifest.yaml"), tmp.path().join("l.jsonl"))
            .unwrap();
        assert!(write_dataset(&[task("good")], &tmp.path().join("l.jsonl")).is_err());
        assert_eq!(
            std::fs::read_to_string(victim.join("manifest.yaml")).unwrap(),
            "keep"
        );
    }

    #[test]
    fn one_bad_jsonl_line_costs_only_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("d.jsonl");
        let mut bytes = crate::jsonl::task_to_line(&task("a")).into_bytes();
        bytes.extend_from_slice(b"\n{\"bad\xff\n");
        bytes.extend_from_slice(crate::jsonl::task_to_line(&task("b")).as_bytes());
        bytes.push(b'\n');
        std::fs::write(&path, bytes).unwrap();
        let ds = Dataset::load(&path).unwrap();
        assert_eq!(ds.tasks.len(), 2);
        assert_eq!(ds.errors.len(), 1);
        assert!(
            ds.errors[0].to_string().contains("line 2: not UTF-8"),
            "{}",
            ds.errors[0]
        );
    }
}
