//! Writing a task's pristine files ([`materialize`]).

use std::path::Path;

use pdl_task::RepoFile;

/// Writes `files` under `dir` (mode 0644), creating folders as needed. `dir`
/// is a folder the harness made: nothing in it came from a submission.
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
