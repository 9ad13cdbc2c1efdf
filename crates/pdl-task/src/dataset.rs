//! Datasets ([`Dataset`]): a set of tasks loaded from a task-tree folder, a JSONL
//! file or a Parquet file, with every task that could not be loaded kept as an
//! error beside the ones that could.

use std::collections::HashMap;
use std::path::Path;

use crate::error::{LoadError, WriteError};
use crate::jsonl::{parse_jsonl, write_jsonl};
use crate::parquet_io::{parse_parquet, write_parquet};
use crate::task::Task;
use crate::tree::{read_tree_dir, task_from_tree, write_tree, TreeFiles, MANIFEST};

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
    /// The format a path names: `.parquet`, `.jsonl` (or `.json`), else a folder.
    pub fn of_path(path: &Path) -> Option<DatasetFormat> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("parquet") => Some(DatasetFormat::Parquet),
            Some("jsonl") | Some("ndjson") => Some(DatasetFormat::Jsonl),
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
}

/// Paths in `files` that would escape the repository or collide.
fn check_files(task: &Task) -> Result<(), (String, String)> {
    let mut seen = std::collections::HashSet::new();
    for f in &task.row.files {
        let bad = f.path.is_empty()
            || f.path.starts_with('/')
            || f.path.contains('\\')
            || f.path
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..");
        if bad {
            return Err(("files".into(), format!("unsafe path `{}`", f.path)));
        }
        if !seen.insert(f.path.as_str()) {
            return Err(("files".into(), format!("`{}` appears twice", f.path)));
        }
    }
    Ok(())
}

impl Dataset {
    /// Builds a dataset, moving rows with unsafe files and repeated instance IDs
    /// into `errors` (the first occurrence of an ID is kept).
    pub fn new(source: impl Into<String>, tasks: Vec<Task>, mut errors: Vec<LoadError>) -> Self {
        let source = source.into();
        let mut kept = Vec::new();
        let mut first_seen: HashMap<String, usize> = HashMap::new();
        for (index, task) in tasks.into_iter().enumerate() {
            if let Err((field, message)) = check_files(&task) {
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
                let bytes =
                    std::fs::read(path).map_err(|e| LoadError::source(&name, e.to_string()))?;
                let (tasks, errors) = if format == DatasetFormat::Parquet {
                    parse_parquet(bytes, &name)
                } else {
                    match String::from_utf8(bytes) {
                        Ok(text) => parse_jsonl(&text, &name),
                        Err(e) => {
                            let offset = e.utf8_error().valid_up_to();
                            let bytes = e.into_bytes();
                            let line = bytes[..offset].iter().filter(|b| **b == b'\n').count() + 1;
                            return Err(LoadError::source(&name, "not UTF-8 text")
                                .at_row(format!("line {line}")));
                        }
                    }
                };
                Ok(Dataset::new(name, tasks, errors))
            }
            DatasetFormat::Tree => {
                if !path.is_dir() {
                    return Err(LoadError::source(&name, "no such file or folder"));
                }
                if path.join(MANIFEST).is_file() {
                    let files = read_tree_dir(path)?;
                    let (tasks, errors) = match task_from_tree(&files, &name) {
                        Ok(t) => (vec![t], vec![]),
                        Err(e) => (vec![], vec![e]),
                    };
                    return Ok(Dataset::new(name, tasks, errors));
                }
                let mut dirs: Vec<_> = std::fs::read_dir(path)
                    .map_err(|e| LoadError::source(&name, e.to_string()))?
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.join(MANIFEST).is_file())
                    .collect();
                dirs.sort();
                if dirs.is_empty() {
                    return Err(LoadError::source(
                        &name,
                        "no task found (a task folder holds manifest.yaml)",
                    ));
                }
                let mut tasks = Vec::new();
                let mut errors = Vec::new();
                for dir in dirs {
                    let dir_name = dir.display().to_string();
                    match read_tree_dir(&dir).and_then(|files| task_from_tree(&files, &dir_name)) {
                        Ok(t) => tasks.push(t),
                        Err(e) => errors.push(e),
                    }
                }
                Ok(Dataset::new(name, tasks, errors))
            }
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

/// Writes tasks to `path` in the format its name calls for: `.parquet`, `.jsonl`,
/// or otherwise a folder with one task tree per task (named by task ID).
pub fn write_dataset(tasks: &[Task], path: &Path) -> Result<(), WriteError> {
    match DatasetFormat::of_path(path) {
        Some(DatasetFormat::Parquet) => write_parquet(tasks, path),
        Some(DatasetFormat::Jsonl) => write_jsonl(tasks, path),
        Some(DatasetFormat::Tree) => {
            for task in tasks {
                write_tree(task, &path.join(&task.row.task_id))?;
            }
            Ok(())
        }
        None => Err(WriteError::UnknownFormat(path.to_path_buf())),
    }
}
