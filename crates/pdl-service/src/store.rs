//! Datasets on disk: an upload is read into a dataset ([`read_upload`]), every
//! task checked, and kept as one canonical JSONL file in the data folder; the
//! workers load it once ([`TaskCache`]). Agent views are served as a tar
//! ([`agent_view_tar`]).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use pdl_task::{Dataset, Task};

/// The format of an upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadFormat {
    /// JSON Lines rows.
    Jsonl,
    /// Apache Parquet.
    Parquet,
    /// A tar of task trees (one task, or a folder of tasks).
    Tar,
}

impl UploadFormat {
    /// The format named (`jsonl`, `parquet`, `tar`), or guessed from the
    /// bytes when not named.
    pub fn resolve(named: Option<&str>, bytes: &[u8]) -> Result<UploadFormat, String> {
        match named {
            Some("jsonl") => Ok(UploadFormat::Jsonl),
            Some("parquet") => Ok(UploadFormat::Parquet),
            Some("tar") => Ok(UploadFormat::Tar),
            Some(other) => Err(format!(
                "`format`: unknown dataset format `{other}` (use jsonl, parquet or tar)"
            )),
            None if bytes.starts_with(b"PAR1") => Ok(UploadFormat::Parquet),
            None if bytes.len() > 262 && &bytes[257..262] == b"ustar" => Ok(UploadFormat::Tar),
            None => Ok(UploadFormat::Jsonl),
        }
    }
}

/// Why an upload was refused (the client's fault: a 4xx).
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The upload is not a usable dataset; the message names the file, line,
    /// entry or field.
    #[error("{0}")]
    Invalid(String),
    /// The server could not store it.
    #[error("cannot store the dataset: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads an uploaded dataset into tasks, inside `scratch` (removed after).
/// Every task must load: one that does not refuses the whole upload, with
/// every error named (paths shown relative to the upload, as `filename`).
pub fn read_upload(
    bytes: &[u8],
    format: UploadFormat,
    filename: &str,
    scratch: &Path,
) -> Result<Vec<Task>, UploadError> {
    let dir = tempfile::Builder::new()
        .prefix("upload-")
        .tempdir_in(scratch)?;
    let path = match format {
        UploadFormat::Jsonl => {
            let p = dir.path().join("upload.jsonl");
            std::fs::write(&p, bytes)?;
            p
        }
        UploadFormat::Parquet => {
            let p = dir.path().join("upload.parquet");
            std::fs::write(&p, bytes)?;
            p
        }
        UploadFormat::Tar => {
            let root = dir.path().join("tree");
            std::fs::create_dir(&root)?;
            unpack_tar(bytes, &root, filename)?;
            tree_root(&root)
        }
    };
    let shown = path.display().to_string();
    let dataset = Dataset::load(&path)
        .map_err(|e| UploadError::Invalid(rename(&e.to_string(), &shown, dir.path(), filename)))?;
    if !dataset.errors.is_empty() {
        let messages: Vec<String> = dataset
            .errors
            .iter()
            .map(|e| rename(&e.to_string(), &shown, dir.path(), filename))
            .collect();
        return Err(UploadError::Invalid(messages.join("; ")));
    }
    if dataset.tasks.is_empty() {
        return Err(UploadError::Invalid(format!("{filename}: holds no task")));
    }
    Ok(dataset.tasks)
}

/// Error text with the scratch paths replaced by the upload's name.
fn rename(message: &str, shown: &str, scratch: &Path, filename: &str) -> String {
    let scratch = scratch.display().to_string();
    message
        .replace(shown, filename)
        .replace(&format!("{scratch}/tree/"), &format!("{filename}: "))
        .replace(&scratch, filename)
}

/// A tar holding one top folder that holds task folders: that folder.
fn tree_root(root: &Path) -> PathBuf {
    let entries: Vec<_> = std::fs::read_dir(root)
        .map(|d| d.filter_map(Result::ok).collect())
        .unwrap_or_default();
    if entries.len() == 1 {
        let only = entries[0].path();
        if only.is_dir() && !only.join("manifest.yaml").exists() {
            return only;
        }
    }
    root.to_path_buf()
}

/// Most entries a dataset tar may hold.
const MAX_TAR_ENTRIES: usize = 200_000;

/// Unpacks regular files and folders of a tar beneath `root`; any other kind
/// of entry, an absolute path or one with `..` refuses the upload.
fn unpack_tar(bytes: &[u8], root: &Path, filename: &str) -> Result<(), UploadError> {
    let bad = |what: String| UploadError::Invalid(format!("{filename}: {what}"));
    let mut archive = tar::Archive::new(bytes);
    let entries = archive
        .entries()
        .map_err(|e| bad(format!("not a tar archive: {e}")))?;
    for (n, entry) in entries.enumerate() {
        if n >= MAX_TAR_ENTRIES {
            return Err(bad(format!("more than {MAX_TAR_ENTRIES} entries")));
        }
        let mut entry = entry.map_err(|e| bad(format!("entry {}: not a tar entry: {e}", n + 1)))?;
        let path = entry
            .path()
            .map_err(|e| bad(format!("entry {}: unreadable path: {e}", n + 1)))?
            .into_owned();
        let shown = path.display().to_string();
        let mut rel = PathBuf::new();
        for c in path.components() {
            match c {
                Component::Normal(part) => rel.push(part),
                Component::CurDir => {}
                _ => return Err(bad(format!("{shown}: a path outside the archive's folder"))),
            }
        }
        if rel.as_os_str().is_empty() {
            continue;
        }
        let target = root.join(&rel);
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            std::fs::create_dir_all(&target)?;
        } else if kind.is_file() {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let mut content = Vec::new();
            entry
                .read_to_end(&mut content)
                .map_err(|e| bad(format!("{shown}: unreadable: {e}")))?;
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            let mut file = options.open(&target).map_err(|e| {
                bad(format!(
                    "{shown}: cannot be written ({e}); a repeated entry?"
                ))
            })?;
            std::io::Write::write_all(&mut file, &content)?;
        } else if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader
        ) {
            continue;
        } else {
            return Err(bad(format!(
                "{shown}: not a regular file or folder (links and special files are refused)"
            )));
        }
    }
    Ok(())
}

/// Tasks of stored datasets, loaded once per dataset.
#[derive(Default)]
pub struct TaskCache {
    loaded: Mutex<HashMap<String, Arc<Vec<Task>>>>,
}

impl TaskCache {
    /// The tasks of the dataset stored as `file` under `data_dir`, known by `id`.
    pub fn get(&self, data_dir: &Path, id: &str, file: &str) -> Result<Arc<Vec<Task>>, String> {
        if let Some(t) = self.loaded.lock().expect("not poisoned").get(id) {
            return Ok(t.clone());
        }
        let dataset = Dataset::load(&data_dir.join(file)).map_err(|e| e.to_string())?;
        if let Some(e) = dataset.errors.first() {
            return Err(e.to_string());
        }
        let tasks = Arc::new(dataset.tasks);
        self.loaded
            .lock()
            .expect("not poisoned")
            .insert(id.to_string(), tasks.clone());
        Ok(tasks)
    }
}

/// Writes `tasks` as the canonical JSONL file `path`.
pub fn write_canonical(tasks: &[Task], path: &Path) -> Result<(), String> {
    pdl_task::write_dataset(tasks, path).map_err(|errors| {
        errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// A tar of what an agent sees of each task (`<task_id>/repo`, `ISSUE.md`,
/// `TASK.md`, `task.json`), as `tasks export --agent-view` writes it.
pub fn agent_view_tar(tasks: &[Task], scratch: &Path) -> std::io::Result<Vec<u8>> {
    let dir = tempfile::Builder::new()
        .prefix("view-")
        .tempdir_in(scratch)?;
    for task in tasks {
        pdl_episode::agent::view::write_agent_view(task, &dir.path().join(&task.row.task_id))?;
    }
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Deterministic);
    for task in tasks {
        builder.append_dir_all(&task.row.task_id, dir.path().join(&task.row.task_id))?;
    }
    builder.into_inner()
}
