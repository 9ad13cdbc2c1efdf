//! Writing a task's pristine files ([`materialize`]).

use std::path::Path;

use pdl_task::RepoFile;

/// Writes `files` under `dir` (mode 0644), creating folders as needed. Every
/// path must be a safe repository path ([`pdl_task::safe::check_repo_path`]:
/// no `..`, no `.git`, no absolute path), and every file is opened beneath
/// `dir` without following a link.
pub fn materialize(files: &[RepoFile], dir: &Path) -> std::io::Result<()> {
    let root = pdl_fs::Dir::create(dir)?;
    for f in files {
        pdl_task::safe::check_repo_path(&f.path).map_err(|why| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{}: unsafe path: {why}", dir.join(&f.path).display()),
            )
        })?;
        root.write(Path::new(&f.path), f.content.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_paths_and_links_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        for bad in ["../outside/x", ".git/config", "/tmp/x", "a/../../x"] {
            let files = vec![RepoFile {
                path: bad.into(),
                content: "x".into(),
            }];
            let err = materialize(&files, &tmp.path().join("ws")).unwrap_err();
            assert!(err.to_string().contains("unsafe path"), "{bad}: {err}");
        }
        let ws = tmp.path().join("ws2");
        std::fs::create_dir(&ws).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("src")).unwrap();
        let files = vec![RepoFile {
            path: "src/x.py".into(),
            content: "x".into(),
        }];
        assert!(materialize(&files, &ws).is_err());
        assert!(std::fs::read_dir(&outside).unwrap().next().is_none());
    }
}
