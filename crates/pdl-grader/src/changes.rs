//! The change set of a submitted tree and its policing ([`police_tree`]).
//!
//! A submission's tree (a patch applied to a pristine copy inside the sandbox,
//! or an agent's final workspace) is read without following any link, with
//! bounds on its size, and compared with the task's pristine files. The result
//! is a [`Policed`] change set: what reaches the graded tree (allowed regular
//! files only, with their bytes), what is dropped, and every violation. Only
//! what the tree actually holds is policed: no spelling of a patch can hide a
//! change from it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use pdl_fs::walk::{walk, Visit, WalkError, WalkKind, WalkLimits};
use pdl_task::task::HIDDEN_DIR;
use pdl_task::RepoFile;

use crate::policy::{is_unsafe_path, PatchPolicy, PathDecision};
use crate::record::PolicyReport;

/// Bounds on reading a submitted tree; going over one is the submission's
/// fault (a policy violation), never the harness's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLimits {
    /// Files, folders and links in the tree.
    pub max_entries: usize,
    /// Folders nested below the root.
    pub max_depth: usize,
    /// Bytes of a path.
    pub max_path_bytes: usize,
    /// Bytes of one file that reaches the graded tree.
    pub max_file_bytes: u64,
    /// Bytes read from the tree in all.
    pub max_total_bytes: u64,
}

impl Default for TreeLimits {
    fn default() -> Self {
        TreeLimits {
            max_entries: 50_000,
            max_depth: 48,
            max_path_bytes: 1024,
            max_file_bytes: 8 << 20,
            max_total_bytes: 128 << 20,
        }
    }
}

/// Where a tree came from: what of it the harness itself made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeOrigin {
    /// A patch applied to a pristine copy: nothing in it is the harness's.
    AppliedPatch,
    /// An agent's workspace: its top-level `.git` is the harness's and is
    /// neither read nor graded.
    Workspace,
}

/// What reaches the graded tree for one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GradedChange {
    /// The file is written with these bytes.
    Write {
        /// Content.
        bytes: Vec<u8>,
        /// Whether any execute bit is set.
        executable: bool,
    },
    /// The pristine file is removed.
    Delete,
}

/// A policed change set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policed {
    /// Allowed changes, by path: exactly what the graded tree gets (when
    /// there is no violation; a violation ends grading).
    pub graded: BTreeMap<String, GradedChange>,
    /// Violations and dropped paths.
    pub report: PolicyReport,
    /// Why each violation is one (path → reason), for the record's detail.
    pub reasons: BTreeMap<String, String>,
}

impl Policed {
    fn violation(&mut self, path: &str, reason: &str) {
        let shown = shown_path(path);
        if !self.report.violations.contains(&shown) {
            self.report.violations.push(shown.clone());
        }
        self.reasons
            .entry(shown)
            .or_insert_with(|| reason.to_string());
    }

    /// A one-line account of the violations.
    pub fn detail(&self, what: &str) -> String {
        let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (path, reason) in &self.reasons {
            by_reason
                .entry(reason.as_str())
                .or_default()
                .push(path.as_str());
        }
        let parts: Vec<String> = by_reason
            .into_iter()
            .map(|(reason, paths)| {
                let mut listed: Vec<&str> = paths.iter().take(8).copied().collect();
                if paths.len() > 8 {
                    listed.push("…");
                }
                format!("{reason}: {}", listed.join(", "))
            })
            .collect();
        format!("{what} {}", parts.join("; "))
    }
}

/// A path as it may appear in a record: printable, at most 300 bytes.
fn shown_path(path: &str) -> String {
    let clean: String = path
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if clean.len() <= 300 {
        return clean;
    }
    let mut end = 300;
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &clean[..end])
}

/// Caches and bytecode that never count as changes.
pub fn is_ignored(rel: &str) -> bool {
    rel.split('/')
        .any(|c| c == "__pycache__" || c == ".pytest_cache" || c.ends_with(".pyc"))
}

/// A program or shared library the kernel would load (ELF), by its first bytes.
fn is_native_code(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

/// Files that configure pytest itself (plugins, options, what is collected):
/// grading machinery a submission may never change, whatever the task's globs
/// say. `conftest.py` anywhere; ini-style files at the root or in a folder of
/// the test suite.
fn is_machinery(path: &str, test_dirs: &BTreeSet<String>) -> bool {
    let (dir, name) = match path.rsplit_once('/') {
        Some((dir, name)) => (dir, name),
        None => ("", path),
    };
    if name == "conftest.py" {
        return true;
    }
    let ini = matches!(
        name,
        "pytest.ini" | ".pytest.ini" | "tox.ini" | "setup.cfg" | "pyproject.toml"
    );
    ini && (dir.is_empty() || test_dirs.contains(dir))
}

/// Root entries that make git take the tree for a repository.
fn looks_like_a_repository(path: &str) -> bool {
    let first = path.split('/').next().unwrap_or("");
    path.split('/').any(|c| c == ".git")
        || (path == first && matches!(first, "HEAD" | "packed-refs" | "commondir" | "gitdir"))
}

/// The violation of a path in (or in place of a folder above) the hidden
/// tests' folder.
pub const RESERVED_FOR_HIDDEN: &str =
    "writes under tests/hidden/, which is reserved for the hidden tests";

/// Reads `tree`, compares it with `pristine` and polices every change.
/// `hidden` lists the paths the hidden tests will occupy; `test_files` the
/// test files, whose folders hold pytest configuration too.
pub fn police_tree(
    tree: &Path,
    origin: TreeOrigin,
    pristine: &[RepoFile],
    policy: &PatchPolicy,
    hidden: &[String],
    test_files: &[String],
    limits: &TreeLimits,
) -> Result<Policed, WalkError> {
    let pristine_by_path: BTreeMap<&str, &[u8]> = pristine
        .iter()
        .map(|f| (f.path.as_str(), f.content.as_bytes()))
        .collect();
    let mut test_dirs: BTreeSet<String> = BTreeSet::new();
    for file in test_files.iter().chain(hidden) {
        let mut dir = file.as_str();
        while let Some((parent, _)) = dir.rsplit_once('/') {
            test_dirs.insert(parent.to_string());
            dir = parent;
        }
    }
    // Every path in or above the hidden tests' folder is refused with one
    // message, whether or not a hidden test lies there: a message of its own
    // for the hidden tests' paths would tell their names to whoever guesses.
    let hidden_root = HIDDEN_DIR.trim_end_matches('/');
    let reserved = |path: &str| {
        path == hidden_root
            || path.starts_with(HIDDEN_DIR)
            || hidden_root.starts_with(&format!("{path}/"))
            || hidden.iter().any(|h| h == path)
    };
    let walk_limits = WalkLimits {
        max_entries: limits.max_entries,
        max_depth: limits.max_depth,
        max_path_bytes: limits.max_path_bytes,
        max_read_bytes: limits.max_total_bytes,
    };
    let entries = walk(tree, &walk_limits, |path, kind| {
        if is_ignored(path) {
            return Visit::Skip;
        }
        if origin == TreeOrigin::Workspace && path == ".git" {
            return Visit::Skip;
        }
        match kind {
            WalkKind::Dir => Visit::Descend,
            WalkKind::File { .. } => match policy.decide(path) {
                PathDecision::Allowed => Visit::Read(limits.max_file_bytes),
                // Compare with the pristine file, read no further than it.
                _ => match pristine_by_path.get(path) {
                    Some(bytes) => Visit::Read(bytes.len() as u64),
                    None => Visit::Skip,
                },
            },
            _ => Visit::Skip,
        }
    });
    let entries = match entries {
        Ok(e) => e,
        Err(e) if e.is_tree_fault() => {
            let mut policed = Policed::default();
            policed.violation(".", &format!("the tree cannot be graded ({e})"));
            return Ok(policed);
        }
        Err(e) => return Err(e),
    };
    let pristine_paths: Vec<&str> = pristine_by_path.keys().copied().collect();
    let forbidden_modules = policy.forbidden_modules(&pristine_paths);
    let mut policed = Policed::default();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut dropped: BTreeSet<String> = BTreeSet::new();
    for entry in &entries {
        let path = entry.path.as_str();
        if is_ignored(path) || (origin == TreeOrigin::Workspace && path == ".git") {
            continue;
        }
        seen.insert(path);
        let pristine = pristine_by_path.get(path).copied();
        let changed = match (&entry.kind, pristine) {
            (WalkKind::Dir, None) => {
                // A folder counts only through what it holds, except where it
                // stands in for a hidden test file or a git repository.
                if reserved(path) && path.starts_with(HIDDEN_DIR) {
                    policed.violation(path, RESERVED_FOR_HIDDEN);
                }
                if looks_like_a_repository(path) {
                    policed.violation(path, "makes the tree look like a git repository");
                }
                continue;
            }
            (WalkKind::Dir, Some(_)) => true,
            (WalkKind::File { mode, .. }, Some(bytes)) => {
                entry.too_large
                    || entry.content.as_deref().is_some_and(|c| c != bytes)
                    || mode & 0o111 != 0
            }
            (WalkKind::File { .. }, None) => true,
            _ => true,
        };
        if !changed {
            continue;
        }
        if is_unsafe_path(path) || path.contains(['\n', '\r', '\t']) {
            policed.violation(path, "a path that cannot name a repository file");
            continue;
        }
        match &entry.kind {
            WalkKind::Symlink(_) => {
                policed.violation(path, "symbolic links are not allowed");
                continue;
            }
            WalkKind::Other(kind) => {
                policed.violation(path, &format!("a {kind} is not allowed"));
                continue;
            }
            WalkKind::Dir => {
                policed.violation(path, "replaces a repository file with a folder");
                continue;
            }
            WalkKind::File { .. } => {}
        }
        if looks_like_a_repository(path) {
            policed.violation(path, "makes the tree look like a git repository");
            continue;
        }
        if reserved(path) {
            policed.violation(path, RESERVED_FOR_HIDDEN);
            continue;
        }
        if is_machinery(path, &test_dirs) {
            policed.violation(path, "changes pytest's configuration or plugins");
            continue;
        }
        if pristine.is_none() && forbidden_modules.names(path) {
            policed.violation(path, "a new module named like a forbidden one");
            continue;
        }
        match policy.decide(path) {
            PathDecision::Forbidden => policed.violation(path, "a forbidden path"),
            PathDecision::Dropped => {
                dropped.insert(shown_path(path));
            }
            PathDecision::Allowed => {
                let WalkKind::File { mode, .. } = entry.kind else {
                    unreachable!("only files get here")
                };
                match &entry.content {
                    Some(bytes) if !entry.too_large && is_native_code(bytes) => {
                        // A test process must run Python, not machine code that
                        // sits below every check (the graded tree is noexec too).
                        policed.violation(path, "holds native machine code");
                    }
                    Some(bytes) if !entry.too_large => {
                        policed.graded.insert(
                            path.to_string(),
                            GradedChange::Write {
                                bytes: bytes.clone(),
                                executable: mode & 0o111 != 0,
                            },
                        );
                    }
                    _ => policed.violation(
                        path,
                        &format!("a file larger than {} bytes", limits.max_file_bytes),
                    ),
                }
            }
        }
    }
    // Pristine files that are gone.
    for file in pristine {
        if seen.contains(file.path.as_str()) || is_ignored(&file.path) {
            continue;
        }
        let path = file.path.as_str();
        if is_machinery(path, &test_dirs) {
            policed.violation(path, "changes pytest's configuration or plugins");
            continue;
        }
        match policy.decide(path) {
            PathDecision::Forbidden => policed.violation(path, "a forbidden path"),
            PathDecision::Dropped => {
                dropped.insert(shown_path(path));
            }
            PathDecision::Allowed => {
                policed
                    .graded
                    .insert(path.to_string(), GradedChange::Delete);
            }
        }
    }
    policed.report.violations.sort();
    policed.report.dropped = dropped.into_iter().collect();
    Ok(policed)
}

/// Builds the graded tree at `dir`: the pristine files, the policed changes,
/// then the hidden test files. `dir` must not exist yet: everything in it is
/// written by the harness, so no link can be in the way.
pub fn build_graded_tree(
    dir: &Path,
    pristine: &[RepoFile],
    graded: &BTreeMap<String, GradedChange>,
    hidden: &[RepoFile],
) -> std::io::Result<()> {
    std::fs::create_dir(dir)?;
    let root = pdl_fs::Dir::open(dir)?;
    for file in pristine {
        match graded.get(&file.path) {
            Some(GradedChange::Delete) => {}
            Some(GradedChange::Write { bytes, executable }) => {
                write_new(&root, dir, &file.path, bytes, *executable)?
            }
            None => write_new(&root, dir, &file.path, file.content.as_bytes(), false)?,
        }
    }
    let pristine_paths: BTreeSet<&str> = pristine.iter().map(|f| f.path.as_str()).collect();
    for (path, change) in graded {
        if let GradedChange::Write { bytes, executable } = change {
            if !pristine_paths.contains(path.as_str()) {
                write_new(&root, dir, path, bytes, *executable)?;
            }
        }
    }
    install_hidden_tests(dir, hidden)
}

/// Writes the hidden test files into a graded tree built before, with the
/// same care.
pub fn install_hidden_tests(dir: &Path, hidden: &[RepoFile]) -> std::io::Result<()> {
    let root = pdl_fs::Dir::open(dir)?;
    for file in hidden {
        write_new(&root, dir, &file.path, file.content.as_bytes(), false)?;
    }
    Ok(())
}

/// Creates `path` in the graded tree `dir` (open as `root`). Every file is
/// created new, relative to the folder's descriptor, one plain component at a
/// time and never through a link (`pdl_fs::Dir`); a path that is not a safe
/// repository path is refused before any call.
fn write_new(
    root: &pdl_fs::Dir,
    dir: &Path,
    path: &str,
    bytes: &[u8],
    executable: bool,
) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    pdl_task::safe::check_repo_path(path).map_err(|why| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: unsafe path: {why}", dir.join(path).display()),
        )
    })?;
    let mut file = root.open_file(Path::new(path), pdl_fs::OpenMode::CreateNew)?;
    if executable {
        file.set_permissions(std::fs::Permissions::from_mode(0o755))?;
    }
    file.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Vec<RepoFile> {
        list.iter()
            .map(|(p, c)| RepoFile {
                path: p.to_string(),
                content: c.to_string(),
            })
            .collect()
    }

    #[test]
    fn the_graded_tree_is_written_beneath_its_folder_only() {
        let tmp = tempfile::tempdir().unwrap();
        let traversal = format!("tests/hidden/{}outside.txt", "../".repeat(3));
        for (i, bad) in [
            traversal.as_str(),
            "/tmp/pdl-abs.txt",
            ".git/config",
            "tests/hidden/a\u{1b}b.py",
        ]
        .iter()
        .enumerate()
        {
            let dir = tmp.path().join(format!("graded{i}"));
            let hidden = files(&[(bad, "x")]);
            let err = build_graded_tree(&dir, &[], &BTreeMap::new(), &hidden).unwrap_err();
            assert!(err.to_string().contains("unsafe path"), "{bad}: {err}");
        }
        assert!(!tmp.path().join("outside.txt").exists());
    }

    fn policy() -> PatchPolicy {
        PatchPolicy::new(
            &["src/**".to_string(), "conftest.py".to_string()],
            &["tests/**".to_string(), "src/frozen.py".to_string()],
        )
        .unwrap()
    }

    fn tree(pristine: &[RepoFile]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        crate::workspace::materialize(pristine, dir.path()).unwrap();
        dir
    }

    fn police(dir: &Path, pristine: &[RepoFile], origin: TreeOrigin) -> Policed {
        police_tree(
            dir,
            origin,
            pristine,
            &policy(),
            &["tests/hidden/test_h.py".to_string()],
            &["tests/public/test_p.py".to_string()],
            &TreeLimits::default(),
        )
        .unwrap()
    }

    #[test]
    fn changes_are_read_from_the_tree_and_policed() {
        let pristine = files(&[
            ("src/a.py", "a\n"),
            ("src/b.py", "b\n"),
            ("README.md", "r\n"),
            ("tests/public/test_p.py", "t\n"),
        ]);
        let dir = tree(&pristine);
        std::fs::write(dir.path().join("src/a.py"), "A\n").unwrap();
        std::fs::remove_file(dir.path().join("src/b.py")).unwrap();
        std::fs::write(dir.path().join("src/new.py"), "n\n").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        std::fs::create_dir_all(dir.path().join("src/__pycache__")).unwrap();
        std::fs::write(dir.path().join("src/__pycache__/a.pyc"), "x").unwrap();
        let p = police(dir.path(), &pristine, TreeOrigin::AppliedPatch);
        assert!(p.report.violations.is_empty(), "{p:?}");
        assert_eq!(p.report.dropped, vec!["notes.txt"]);
        assert_eq!(
            p.graded.keys().map(String::as_str).collect::<Vec<_>>(),
            vec!["src/a.py", "src/b.py", "src/new.py"]
        );
        assert_eq!(p.graded["src/b.py"], GradedChange::Delete);
    }

    /// A path of a hidden test and a guessed path beside it are refused
    /// alike: the policy's answer tells nothing of the hidden tests' names.
    #[test]
    fn hidden_test_paths_and_guesses_get_the_same_answer() {
        let pristine = files(&[("src/a.py", "a\n"), ("tests/public/test_p.py", "t\n")]);
        let answer = |path: &str, folder: bool| {
            let dir = tree(&pristine);
            let at = dir.path().join(path);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            if folder {
                std::fs::create_dir_all(&at).unwrap();
            } else {
                std::fs::write(&at, "x").unwrap();
            }
            let p = police(dir.path(), &pristine, TreeOrigin::Workspace);
            assert_eq!(p.report.violations, vec![path.to_string()], "{path}");
            p.detail("the workspace").replace(path, "PATH")
        };
        let hidden = answer("tests/hidden/test_h.py", false);
        assert!(hidden.contains(RESERVED_FOR_HIDDEN), "{hidden}");
        for guess in ["tests/hidden/test_guess.py", "tests/hidden/conftest.py"] {
            assert_eq!(answer(guess, false), hidden, "{guess}");
        }
        assert_eq!(answer("tests/hidden/test_h.py", true), hidden);
        assert_eq!(answer("tests/hidden/test_guess.py", true), hidden);
    }

    #[test]
    fn links_specials_repositories_machinery_and_hidden_paths_are_violations() {
        let pristine = files(&[("src/a.py", "a\n"), ("tests/public/test_p.py", "t\n")]);
        type Make = Box<dyn Fn(&Path)>;
        let cases: Vec<(&str, Make)> = vec![
            (
                "src/link",
                Box::new(|d: &Path| {
                    std::os::unix::fs::symlink("../tests", d.join("src/link")).unwrap()
                }),
            ),
            (
                "HEAD",
                Box::new(|d: &Path| std::fs::write(d.join("HEAD"), "ref: refs/heads/x").unwrap()),
            ),
            (
                "src/.git/config",
                Box::new(|d: &Path| {
                    std::fs::create_dir_all(d.join("src/.git")).unwrap();
                    std::fs::write(d.join("src/.git/config"), "[filter]").unwrap();
                }),
            ),
            (
                "conftest.py",
                Box::new(|d: &Path| std::fs::write(d.join("conftest.py"), "x").unwrap()),
            ),
            (
                "src/conftest.py",
                Box::new(|d: &Path| std::fs::write(d.join("src/conftest.py"), "x").unwrap()),
            ),
            (
                "tests/hidden",
                Box::new(|d: &Path| std::fs::write(d.join("tests/hidden"), "x").unwrap()),
            ),
            (
                "src/frozen.py",
                Box::new(|d: &Path| std::fs::write(d.join("src/frozen.py"), "x").unwrap()),
            ),
        ];
        for (path, make) in cases {
            let dir = tree(&pristine);
            make(dir.path());
            let p = police(dir.path(), &pristine, TreeOrigin::AppliedPatch);
            assert!(
                p.report.violations.iter().any(|v| v == path),
                "{path}: {:?}",
                p.report
            );
        }
    }

    #[test]
    fn a_workspace_keeps_its_own_git_folder_out_of_the_change_set() {
        let pristine = files(&[("src/a.py", "a\n")]);
        let dir = tree(&pristine);
        std::fs::create_dir_all(dir.path().join(".git/objects")).unwrap();
        std::fs::write(dir.path().join(".git/config"), "[core]").unwrap();
        let p = police(dir.path(), &pristine, TreeOrigin::Workspace);
        assert!(p.report.violations.is_empty(), "{p:?}");
        let p = police(dir.path(), &pristine, TreeOrigin::AppliedPatch);
        assert!(!p.report.violations.is_empty());
    }

    #[test]
    fn oversized_and_unreadable_trees_are_the_submissions_fault() {
        let pristine = files(&[("src/a.py", "a\n")]);
        let dir = tree(&pristine);
        let big = std::fs::File::create(dir.path().join("src/big.py")).unwrap();
        big.set_len(64 << 20).unwrap();
        let p = police(dir.path(), &pristine, TreeOrigin::Workspace);
        assert_eq!(p.report.violations, vec!["src/big.py"]);
        // A dropped sparse file is never read.
        let dir = tree(&pristine);
        for i in 0..8 {
            let f = std::fs::File::create(dir.path().join(format!("docs-{i}.bin"))).unwrap();
            f.set_len(255 << 20).unwrap();
        }
        let p = police(dir.path(), &pristine, TreeOrigin::Workspace);
        assert!(p.report.violations.is_empty());
        assert_eq!(p.report.dropped.len(), 8);
        // Too deep.
        let dir = tree(&pristine);
        let mut deep = dir.path().join("docs");
        for _ in 0..60 {
            deep = deep.join("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        let p = police(dir.path(), &pristine, TreeOrigin::Workspace);
        assert_eq!(p.report.violations, vec!["."], "{p:?}");
        assert!(
            p.detail("the workspace").contains("nested"),
            "{}",
            p.detail("x")
        );
    }

    #[test]
    fn the_graded_tree_holds_pristine_files_changes_and_hidden_tests() {
        let pristine = files(&[("src/a.py", "a\n"), ("src/b.py", "b\n")]);
        let mut graded = BTreeMap::new();
        graded.insert(
            "src/a.py".to_string(),
            GradedChange::Write {
                bytes: b"A\n".to_vec(),
                executable: false,
            },
        );
        graded.insert("src/b.py".to_string(), GradedChange::Delete);
        graded.insert(
            "src/c.py".to_string(),
            GradedChange::Write {
                bytes: b"C\n".to_vec(),
                executable: true,
            },
        );
        let hidden = files(&[("tests/hidden/test_h.py", "def test(): pass\n")]);
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("tree");
        build_graded_tree(&dir, &pristine, &graded, &hidden).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("src/a.py")).unwrap(),
            "A\n"
        );
        assert!(!dir.join("src/b.py").exists());
        assert_eq!(
            std::fs::read_to_string(dir.join("src/c.py")).unwrap(),
            "C\n"
        );
        assert!(dir.join("tests/hidden/test_h.py").exists());
        assert!(build_graded_tree(&dir, &pristine, &graded, &hidden).is_err());
    }
}
