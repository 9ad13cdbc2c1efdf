//! Working trees: materializing a task's pristine files ([`materialize`]) and
//! the change set of a workspace against them ([`workspace_changes`]).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use pdl_task::RepoFile;

/// Folders and files a workspace diff ignores.
pub fn is_ignored(rel: &str) -> bool {
    rel.split('/')
        .any(|c| c == ".git" || c == "__pycache__" || c == ".pytest_cache" || c.ends_with(".pyc"))
}

/// Writes `files` under `dir` (mode 0644), creating folders as needed.
pub fn materialize(files: &[RepoFile], dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for f in files {
        let path = dir.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, f.content.as_bytes())?;
    }
    Ok(())
}

/// One entry of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A regular file.
    File {
        /// Content.
        bytes: Vec<u8>,
        /// True when any execute bit is set.
        executable: bool,
    },
    /// A symbolic link.
    Symlink(String),
    /// Something else (fifo, socket, device).
    Special,
}

/// What a workspace did to one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Created.
    Added(Entry),
    /// Content or mode changed.
    Modified(Entry),
    /// Deleted.
    Deleted,
}

impl Change {
    /// True when the new state is a symlink or special file.
    pub fn is_link_or_special(&self) -> bool {
        matches!(
            self,
            Change::Added(Entry::Symlink(_) | Entry::Special)
                | Change::Modified(Entry::Symlink(_) | Entry::Special)
        )
    }
}

/// Reads every entry under `dir`, except ignored ones.
pub fn scan_tree(dir: &Path) -> std::io::Result<BTreeMap<String, Entry>> {
    let mut out = BTreeMap::new();
    let mut walker = walkdir::WalkDir::new(dir).follow_links(false).into_iter();
    while let Some(entry) = walker.next() {
        let entry = entry.map_err(std::io::Error::other)?;
        let rel = entry
            .path()
            .strip_prefix(dir)
            .expect("walkdir stays under its root")
            .to_string_lossy()
            .replace('\\', "/");
        if rel.is_empty() {
            continue;
        }
        if is_ignored(&rel) {
            if entry.file_type().is_dir() {
                walker.skip_current_dir();
            }
            continue;
        }
        let ft = entry.file_type();
        if ft.is_dir() {
            continue;
        }
        let value = if ft.is_symlink() {
            let target = std::fs::read_link(entry.path())?;
            Entry::Symlink(target.to_string_lossy().into_owned())
        } else if ft.is_file() {
            let meta = entry.metadata().map_err(std::io::Error::other)?;
            Entry::File {
                bytes: std::fs::read(entry.path())?,
                executable: meta.permissions().mode() & 0o111 != 0,
            }
        } else {
            Entry::Special
        };
        out.insert(rel, value);
    }
    Ok(out)
}

/// The change set of `workspace` against the pristine `files`.
pub fn workspace_changes(
    files: &[RepoFile],
    workspace: &Path,
) -> std::io::Result<BTreeMap<String, Change>> {
    let current = scan_tree(workspace)?;
    let mut changes = BTreeMap::new();
    for f in files {
        if is_ignored(&f.path) {
            continue;
        }
        match current.get(&f.path) {
            None => {
                changes.insert(f.path.clone(), Change::Deleted);
            }
            Some(Entry::File { bytes, executable }) => {
                if bytes != f.content.as_bytes() || *executable {
                    changes.insert(f.path.clone(), Change::Modified(current[&f.path].clone()));
                }
            }
            Some(other) => {
                changes.insert(f.path.clone(), Change::Modified(other.clone()));
            }
        }
    }
    for (path, entry) in &current {
        if !files.iter().any(|f| &f.path == path) {
            changes.insert(path.clone(), Change::Added(entry.clone()));
        }
    }
    Ok(changes)
}

/// Applies one allowed change to the graded tree at `dir`.
pub fn apply_change(dir: &Path, path: &str, change: &Change) -> std::io::Result<()> {
    let target = dir.join(path);
    match change {
        Change::Deleted => match std::fs::remove_file(&target) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
        Change::Added(Entry::File { bytes, executable })
        | Change::Modified(Entry::File { bytes, executable }) => {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&target, bytes)?;
            let mode = if *executable { 0o755 } else { 0o644 };
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))
        }
        _ => Err(std::io::Error::other(format!(
            "{path}: only regular files can be applied"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_cover_added_modified_deleted_mode_and_symlinks() {
        let files = vec![
            RepoFile {
                path: "src/a.py".into(),
                content: "a\n".into(),
            },
            RepoFile {
                path: "src/b.py".into(),
                content: "b\n".into(),
            },
            RepoFile {
                path: "run.sh".into(),
                content: "echo\n".into(),
            },
            RepoFile {
                path: "same.txt".into(),
                content: "same\n".into(),
            },
        ];
        let dir = tempfile::tempdir().unwrap();
        materialize(&files, dir.path()).unwrap();
        std::fs::write(dir.path().join("src/a.py"), "A\n").unwrap();
        std::fs::remove_file(dir.path().join("src/b.py")).unwrap();
        std::fs::set_permissions(
            dir.path().join("run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::fs::write(dir.path().join("new.txt"), "n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("src/link")).unwrap();
        std::fs::create_dir_all(dir.path().join("src/__pycache__")).unwrap();
        std::fs::write(dir.path().join("src/__pycache__/a.cpython-311.pyc"), "x").unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join(".git/HEAD"), "ref").unwrap();

        let changes = workspace_changes(&files, dir.path()).unwrap();
        let keys: Vec<&str> = changes.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            vec!["new.txt", "run.sh", "src/a.py", "src/b.py", "src/link"]
        );
        assert_eq!(changes["src/b.py"], Change::Deleted);
        assert!(changes["src/link"].is_link_or_special());
        assert!(matches!(
            changes["run.sh"],
            Change::Modified(Entry::File {
                executable: true,
                ..
            })
        ));
    }
}
