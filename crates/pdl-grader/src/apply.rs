//! Applying patches to a graded tree ([`apply_patch`]), all or nothing, through
//! `git apply`: first exactly, then with `--recount`, then with one line of
//! context (`-C1`). `git apply` copes with offsets, new, deleted and renamed
//! files, modes and binary sections, and changes nothing when any section fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use pdl_task::diff::PatchSet;

/// A patch that did not apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// `git` could not be started.
    #[error("cannot run git ({0}); install git to grade patches")]
    GitUnavailable(String),
    /// Every attempt was refused; the message is git's own, from the last attempt.
    #[error("{0}")]
    Rejected(String),
}

impl ApplyError {
    /// True when the harness, not the patch, is at fault.
    pub fn is_infrastructure(&self) -> bool {
        matches!(self, ApplyError::GitUnavailable(_))
    }
}

/// The text of the sections of `set` that `keep` accepts, joined.
pub fn filtered_patch(set: &PatchSet, keep: impl Fn(usize) -> bool) -> String {
    set.files
        .iter()
        .enumerate()
        .filter(|(i, _)| keep(*i))
        .map(|(_, f)| {
            let mut raw = f.raw.clone();
            if !raw.ends_with('\n') {
                raw.push('\n');
            }
            raw
        })
        .collect()
}

/// A `git` command run in `dir` that never finds a repository around `dir` and
/// never reads the user's or the system's configuration.
pub fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    let parent = dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    // Never let git find a repository around the graded tree (that would make it
    // skip paths outside the current folder), nor read the user's config.
    cmd.current_dir(dir)
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .env("GIT_CEILING_DIRECTORIES", parent)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", dir)
        .env("LC_ALL", "C");
    cmd
}

/// Applies `patch` (already parsed into `set`) inside `dir`. The patch text is
/// written to `scratch` first. All or nothing.
pub fn apply_patch(
    dir: &Path,
    patch: &str,
    set: &PatchSet,
    scratch: &Path,
) -> Result<(), ApplyError> {
    if set.files.is_empty() {
        return Ok(());
    }
    let patch_file = scratch.join(format!("apply-{}.diff", std::process::id()));
    let mut text = patch.to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    std::fs::write(&patch_file, text).map_err(|e| {
        ApplyError::GitUnavailable(format!("cannot write {}: {e}", patch_file.display()))
    })?;
    let strip = format!("-p{}", set.strip);
    let attempts: [&[&str]; 3] = [&[], &["--recount"], &["--recount", "-C1"]];
    let mut last_error = String::new();
    for extra in attempts {
        let output = git_command(dir)
            .arg("apply")
            .arg("--whitespace=nowarn")
            .arg(&strip)
            .args(extra)
            .arg(&patch_file)
            .output()
            .map_err(|e| ApplyError::GitUnavailable(e.to_string()))?;
        if output.status.success() {
            let _ = std::fs::remove_file(&patch_file);
            return Ok(());
        }
        last_error = String::from_utf8_lossy(&output.stderr).trim().to_string();
    }
    let _ = std::fs::remove_file(&patch_file);
    let shown = last_error.replace(&patch_file.display().to_string(), "<patch>");
    Err(ApplyError::Rejected(if shown.is_empty() {
        "git apply refused the patch".into()
    } else {
        shown
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdl_task::diff::parse_patch;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (p, c) in files {
            let path = dir.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, c).unwrap();
        }
        dir
    }

    fn apply(dir: &Path, patch: &str) -> Result<(), ApplyError> {
        let set = parse_patch(patch).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        apply_patch(dir, patch, &set, scratch.path())
    }

    #[test]
    fn applies_with_line_offsets() {
        let dir = tree(&[("src/x.py", "0\n1\n2\n3\n4\na\nb\nc\n5\n")]);
        // The hunk claims line 2; the context is really at line 6. (A hunk at
        // line 1 must match the start of the file, as in git.)
        apply(
            dir.path(),
            "--- a/src/x.py\n+++ b/src/x.py\n@@ -2,3 +2,3 @@\n a\n-b\n+B\n c\n",
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("src/x.py")).unwrap(),
            "0\n1\n2\n3\n4\na\nB\nc\n5\n"
        );
    }

    #[test]
    fn applies_new_deleted_renamed_and_mode_changes() {
        let dir = tree(&[("a.py", "a\n"), ("gone.py", "g\n"), ("run.sh", "r\n")]);
        let patch = concat!(
            "diff --git a/new/n.py b/new/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/new/n.py\n@@ -0,0 +1 @@\n+n\n",
            "diff --git a/gone.py b/gone.py\ndeleted file mode 100644\n--- a/gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-g\n",
            "diff --git a/a.py b/b.py\nsimilarity index 100%\nrename from a.py\nrename to b.py\n",
            "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n",
        );
        apply(dir.path(), patch).unwrap();
        assert!(dir.path().join("new/n.py").exists());
        assert!(!dir.path().join("gone.py").exists());
        assert!(dir.path().join("b.py").exists() && !dir.path().join("a.py").exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111);
    }

    #[test]
    fn plain_unprefixed_headers_apply() {
        let dir = tree(&[("src/x.py", "a\n")]);
        apply(
            dir.path(),
            "--- src/x.py\n+++ src/x.py\n@@ -1 +1 @@\n-a\n+b\n",
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("src/x.py")).unwrap(),
            "b\n"
        );
    }

    #[test]
    fn wrong_hunk_counts_apply_after_recount() {
        let dir = tree(&[("x.py", "a\nb\nc\n")]);
        // Claims 4 old lines but carries 3: a hand-edited patch.
        let patch = "--- a/x.py\n+++ b/x.py\n@@ -1,4 +1,4 @@\n a\n-b\n+B\n c\n";
        let set = pdl_task::diff::PatchSet {
            files: vec![pdl_task::diff::FilePatch {
                old_path: Some("x.py".into()),
                new_path: Some("x.py".into()),
                kind: pdl_task::diff::ChangeKind::Modified,
                old_mode: None,
                new_mode: None,
                binary: false,
                hunks: vec![],
                raw: patch.into(),
            }],
            strip: 1,
        };
        let scratch = tempfile::tempdir().unwrap();
        apply_patch(dir.path(), patch, &set, scratch.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("x.py")).unwrap(),
            "a\nB\nc\n"
        );
    }

    #[test]
    fn a_failing_section_changes_nothing() {
        let dir = tree(&[("a.py", "a\n"), ("b.py", "b\n")]);
        let patch = concat!(
            "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-a\n+A\n",
            "--- a/b.py\n+++ b/b.py\n@@ -1 +1 @@\n-not there\n+B\n",
        );
        let err = apply(dir.path(), patch).unwrap_err();
        assert!(matches!(err, ApplyError::Rejected(_)));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.py")).unwrap(),
            "a\n"
        );
    }

    #[test]
    fn a_graded_tree_inside_another_repository_still_applies() {
        let outer = tempfile::tempdir().unwrap();
        git_command(outer.path())
            .args(["init", "-q"])
            .status()
            .unwrap();
        let inner = outer.path().join("work");
        std::fs::create_dir_all(inner.join("src")).unwrap();
        std::fs::write(inner.join("src/x.py"), "a\n").unwrap();
        apply(
            &inner,
            "--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n-a\n+b\n",
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(inner.join("src/x.py")).unwrap(),
            "b\n"
        );
    }
}
