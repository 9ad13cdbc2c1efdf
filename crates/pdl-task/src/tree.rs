//! The task tree: the browsable, reviewable form of one task.
//!
//! ```text
//! tasks/<task_id>/
//!   manifest.yaml            every scalar and list column, the ladder, limits
//!   fixtures/                the starting repository = `files`
//!   hidden/                  the hidden test files, placed at tests/hidden/
//!   solution/gold.diff       = `patch`
//!   solution/test_patch.diff only when `test_patch` is not the canonical
//!                            rendering of hidden/ (kept so conversion is lossless)
//!   ladder/<rung>            one diff per registered rung
//!   certificates/            dated certification results (`pdl-swe certify`);
//!                            not part of the task, skipped when it is read
//!   reviews/                 reviews of the task (fairness of its hidden tests);
//!                            not part of the task either
//! ```
//!
//! [`task_from_tree`] and [`task_to_tree`] convert between a map of relative path
//! to bytes and a [`Task`]; converting one way and back reproduces every byte.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{LoadError, WriteError};
use crate::row::{InstanceRow, RepoFile};
use crate::safe::{
    check_name, check_repo_path, check_yaml_bounds, MAX_TASK_BYTES, MAX_TREE_FILE_BYTES,
};
use crate::task::{
    hidden_files_from_patch, render_test_patch, HiddenFile, LadderRung, Limits, Task, TaskExtras,
};

/// The manifest file's name.
pub const MANIFEST: &str = "manifest.yaml";
const FIXTURES: &str = "fixtures/";
const HIDDEN: &str = "hidden/";
const GOLD: &str = "solution/gold.diff";
const TEST_PATCH: &str = "solution/test_patch.diff";
const LADDER: &str = "ladder/";

/// The folder of a task tree that holds its certificates. It is not part of
/// the task: [`read_tree_dir`] skips it, so certifying a task never changes
/// what it is (nor its digest).
pub const CERTIFICATES_DIR: &str = "certificates";

/// The folder of a task tree that holds reviews of the task (the fairness
/// review of its hidden tests). Like [`CERTIFICATES_DIR`] it is not part of
/// the task: a review never changes what it reviews.
pub const REVIEWS_DIR: &str = "reviews";

/// Whether a top-level entry of a task folder is kept apart from the task.
fn is_beside_the_task(name: &std::ffi::OsStr) -> bool {
    name == CERTIFICATES_DIR || name == REVIEWS_DIR
}

/// A task tree as relative path (with `/`) → bytes.
pub type TreeFiles = BTreeMap<String, Vec<u8>>;

/// A ladder entry as the manifest lists it (the diff lives in `ladder/<name>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestRung {
    /// The rung's file name under `ladder/`.
    pub name: String,
    /// The registered reward.
    pub reward: f64,
    /// What the rung gets right and misses.
    #[serde(default)]
    pub note: String,
}

/// `manifest.yaml`: every scalar and list column of the row, plus the ladder and
/// limits. Field order is the canonical order of the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(non_snake_case, missing_docs)]
pub struct Manifest {
    pub instance_id: String,
    pub task_id: String,
    pub task_version: i64,
    pub tier: String,
    pub domain: String,
    pub problem_statement: String,
    pub FAIL_TO_PASS: Vec<String>,
    pub PASS_TO_PASS: Vec<String>,
    pub patch_policy_allowed: Vec<String>,
    pub patch_policy_forbidden: Vec<String>,
    pub token_budget: i64,
    pub hidden_test_count: i64,
    pub public_test_count: i64,
    pub graded_ladder_rungs: Vec<String>,
    pub reward_formula: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ladder: Vec<ManifestRung>,
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
}

impl Manifest {
    fn from_task(task: &Task) -> Self {
        let r = &task.row;
        Manifest {
            instance_id: r.instance_id.clone(),
            task_id: r.task_id.clone(),
            task_version: r.task_version,
            tier: r.tier.clone(),
            domain: r.domain.clone(),
            problem_statement: r.problem_statement.clone(),
            FAIL_TO_PASS: r.fail_to_pass.clone(),
            PASS_TO_PASS: r.pass_to_pass.clone(),
            patch_policy_allowed: r.patch_policy_allowed.clone(),
            patch_policy_forbidden: r.patch_policy_forbidden.clone(),
            token_budget: r.token_budget,
            hidden_test_count: r.hidden_test_count,
            public_test_count: r.public_test_count,
            graded_ladder_rungs: r.graded_ladder_rungs.clone(),
            reward_formula: r.reward_formula.clone(),
            ladder: task
                .extras
                .ladder
                .iter()
                .map(|l| ManifestRung {
                    name: l.name.clone(),
                    reward: l.reward,
                    note: l.note.clone(),
                })
                .collect(),
            limits: task.extras.limits.clone(),
        }
    }

    /// The canonical YAML text of this manifest.
    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).expect("manifests always serialize")
    }
}

fn is_junk(path: &str) -> bool {
    path.split('/').any(|c| {
        c == "__pycache__" || c == ".pytest_cache" || c == ".DS_Store" || c.ends_with(".pyc")
    })
}

/// Reads a task folder into a [`TreeFiles`] map, skipping `__pycache__/`, `*.pyc`,
/// `.pytest_cache/` and `.DS_Store`, and the top-level [`CERTIFICATES_DIR`]
/// and [`REVIEWS_DIR`] (which are never entered).
///
/// Every entry is looked at without following it before anything is opened:
/// a symbolic link, FIFO, socket or device anywhere in the tree is an error
/// naming it (nothing is opened, so a FIFO never blocks), and so is a file
/// larger than [`MAX_TREE_FILE_BYTES`] or a tree holding more than
/// [`MAX_TASK_BYTES`] in all. Files are opened beneath the folder, never
/// through a link, and read within their bound.
pub fn read_tree_dir(dir: &Path) -> Result<TreeFiles, LoadError> {
    let name = dir.display().to_string();
    let root = pdl_fs::Dir::open(dir).map_err(|e| LoadError::source(&name, e.to_string()))?;
    let mut files = TreeFiles::new();
    let mut total: u64 = 0;
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| !(e.depth() == 1 && is_beside_the_task(e.file_name())))
    {
        let entry = entry.map_err(|e| LoadError::source(&name, e.to_string()))?;
        let relative = entry
            .path()
            .strip_prefix(dir)
            .expect("walkdir stays under its root");
        let rel = relative
            .to_str()
            .ok_or_else(|| {
                LoadError::source(&name, "a path is not valid UTF-8")
                    .in_field(relative.display().to_string())
            })?
            .to_string();
        if rel.is_empty() || is_junk(&rel) {
            continue;
        }
        let file_type = entry.file_type();
        if file_type.is_dir() {
            continue;
        }
        let refuse = |what: &str| {
            LoadError::source(
                &name,
                format!("{what}; a task tree holds only regular files and folders"),
            )
            .in_field(rel.clone())
        };
        if file_type.is_symlink() {
            return Err(refuse("a symbolic link"));
        }
        if !file_type.is_file() {
            use std::os::unix::fs::FileTypeExt;
            return Err(refuse(if file_type.is_fifo() {
                "a FIFO"
            } else if file_type.is_socket() {
                "a socket"
            } else if file_type.is_char_device() || file_type.is_block_device() {
                "a device"
            } else {
                "a special file"
            }));
        }
        let size = entry
            .metadata()
            .map_err(|e| LoadError::source(&name, e.to_string()).in_field(rel.clone()))?
            .len();
        if size > MAX_TREE_FILE_BYTES {
            return Err(LoadError::source(
                &name,
                format!("{size} bytes; a task tree's file may hold at most {MAX_TREE_FILE_BYTES}"),
            )
            .in_field(rel));
        }
        total = total.saturating_add(size);
        if total > MAX_TASK_BYTES {
            return Err(LoadError::source(
                &name,
                format!("the task's files hold more than {MAX_TASK_BYTES} bytes in all"),
            )
            .in_field(rel));
        }
        let bytes = root
            .read(relative, MAX_TREE_FILE_BYTES)
            .map_err(|e| LoadError::source(&name, e.kind.to_string()).in_field(rel.clone()))?
            .ok_or_else(|| LoadError::source(&name, "vanished while read").in_field(rel.clone()))?;
        files.insert(rel, bytes);
    }
    Ok(files)
}

fn utf8(files: &TreeFiles, path: &str, source: &str) -> Result<Option<String>, LoadError> {
    match files.get(path) {
        None => Ok(None),
        Some(bytes) => String::from_utf8(bytes.clone()).map(Some).map_err(|e| {
            LoadError::source(
                source,
                format!(
                    "not UTF-8 text (invalid byte at offset {})",
                    e.utf8_error().valid_up_to()
                ),
            )
            .in_field(path)
        }),
    }
}

/// Builds a task from a tree map. `source` names the tree in errors.
pub fn task_from_tree(files: &TreeFiles, source: &str) -> Result<Task, LoadError> {
    let manifest_text = utf8(files, MANIFEST, source)?
        .ok_or_else(|| LoadError::source(source, "missing manifest.yaml").in_field(MANIFEST))?;
    check_yaml_bounds(&manifest_text)
        .map_err(|why| LoadError::source(source, why).in_field(MANIFEST))?;
    let manifest: Manifest = serde_yaml_ng::from_str(&manifest_text)
        .map_err(|e| LoadError::source(source, e.to_string()).in_field(MANIFEST))?;
    let at = |field: &str, message: String| {
        LoadError::source(source, message)
            .for_instance(Some(&manifest.instance_id))
            .in_field(field)
    };

    let mut repo_files = Vec::new();
    let mut hidden = Vec::new();
    let mut ladder_files = BTreeMap::new();
    for (path, _) in files.iter() {
        if let Some(rel) = path.strip_prefix(FIXTURES) {
            let content = utf8(files, path, source)?.unwrap_or_default();
            repo_files.push(RepoFile {
                path: rel.to_string(),
                content,
            });
        } else if let Some(rel) = path.strip_prefix(HIDDEN) {
            let content = utf8(files, path, source)?.unwrap_or_default();
            hidden.push(HiddenFile {
                relative_path: rel.to_string(),
                content,
            });
        } else if let Some(rel) = path.strip_prefix(LADDER) {
            ladder_files.insert(
                rel.to_string(),
                utf8(files, path, source)?.unwrap_or_default(),
            );
        } else if path != MANIFEST && path != GOLD && path != TEST_PATCH {
            return Err(at(
                path,
                "unexpected file (a task tree holds manifest.yaml, fixtures/, hidden/, solution/gold.diff, solution/test_patch.diff and ladder/)".into(),
            ));
        }
    }
    let patch = utf8(files, GOLD, source)?
        .ok_or_else(|| at(GOLD, "missing: the reference patch is required".into()))?;
    let rendered = render_test_patch(&hidden);
    let test_patch = match utf8(files, TEST_PATCH, source)? {
        Some(verbatim) => {
            let from_patch = hidden_files_from_patch(&verbatim).unwrap_or_default();
            if !hidden.is_empty() && render_test_patch(&from_patch) != rendered {
                return Err(at(
                    TEST_PATCH,
                    "disagrees with the files under hidden/ (keep one of them)".into(),
                ));
            }
            verbatim
        }
        None => rendered,
    };
    let mut ladder = Vec::new();
    for entry in &manifest.ladder {
        let diff = ladder_files.remove(&entry.name).ok_or_else(|| {
            at(
                &format!("{LADDER}{}", entry.name),
                "missing: the manifest registers this rung".into(),
            )
        })?;
        ladder.push(LadderRung {
            name: entry.name.clone(),
            reward: entry.reward,
            note: entry.note.clone(),
            diff,
        });
    }
    if let Some(stray) = ladder_files.keys().next() {
        return Err(at(
            &format!("{LADDER}{stray}"),
            "not registered in the manifest's ladder".into(),
        ));
    }
    let row = InstanceRow {
        instance_id: manifest.instance_id.clone(),
        task_id: manifest.task_id.clone(),
        task_version: manifest.task_version,
        tier: manifest.tier.clone(),
        domain: manifest.domain.clone(),
        problem_statement: manifest.problem_statement.clone(),
        patch,
        test_patch,
        fail_to_pass: manifest.FAIL_TO_PASS.clone(),
        pass_to_pass: manifest.PASS_TO_PASS.clone(),
        files: repo_files,
        patch_policy_allowed: manifest.patch_policy_allowed.clone(),
        patch_policy_forbidden: manifest.patch_policy_forbidden.clone(),
        token_budget: manifest.token_budget,
        hidden_test_count: manifest.hidden_test_count,
        public_test_count: manifest.public_test_count,
        graded_ladder_rungs: manifest.graded_ladder_rungs.clone(),
        reward_formula: manifest.reward_formula.clone(),
    };
    let manifest_yaml = (manifest.to_yaml() != manifest_text).then_some(manifest_text);
    Ok(Task {
        row,
        extras: TaskExtras {
            ladder,
            limits: manifest.limits.clone(),
            manifest_yaml,
        },
    })
}

/// Renders a task as a tree map. Fails when a path in the row could escape the
/// task folder.
pub fn task_to_tree(task: &Task) -> Result<TreeFiles, String> {
    let mut files = TreeFiles::new();
    let manifest = Manifest::from_task(task);
    let manifest_text = match &task.extras.manifest_yaml {
        Some(text)
            if check_yaml_bounds(text).is_ok()
                && serde_yaml_ng::from_str::<Manifest>(text).ok().as_ref() == Some(&manifest) =>
        {
            text.clone()
        }
        _ => manifest.to_yaml(),
    };
    files.insert(MANIFEST.to_string(), manifest_text.into_bytes());
    for f in &task.row.files {
        if let Err(why) = check_repo_path(&f.path) {
            return Err(format!("files: unsafe path `{}`: {why}", f.path));
        }
        let key = format!("{FIXTURES}{}", f.path);
        if files.insert(key, f.content.clone().into_bytes()).is_some() {
            return Err(format!("files: `{}` appears twice", f.path));
        }
    }
    files.insert(GOLD.to_string(), task.row.patch.clone().into_bytes());
    let hidden = hidden_files_from_patch(&task.row.test_patch).unwrap_or_default();
    for h in &hidden {
        if let Err(why) = check_repo_path(&h.relative_path) {
            return Err(format!(
                "test_patch: unsafe path `{}`: {why}",
                h.relative_path
            ));
        }
        files.insert(
            format!("{HIDDEN}{}", h.relative_path),
            h.content.clone().into_bytes(),
        );
    }
    if render_test_patch(&hidden) != task.row.test_patch {
        files.insert(
            TEST_PATCH.to_string(),
            task.row.test_patch.clone().into_bytes(),
        );
    }
    for rung in &task.extras.ladder {
        if let Err(why) = check_name(&rung.name) {
            return Err(format!("ladder: unsafe rung name `{}`: {why}", rung.name));
        }
        files.insert(
            format!("{LADDER}{}", rung.name),
            rung.diff.clone().into_bytes(),
        );
    }
    Ok(files)
}

/// Writes a task tree into a new folder `<root>/<task_id>`: the task ID must
/// be a safe name, the folder must not exist yet (or be empty), and every
/// file is created new beneath it without following a link.
pub fn write_tree_beneath(task: &Task, root: &pdl_fs::Dir) -> Result<(), WriteError> {
    let id = &task.row.task_id;
    let folder = root.display_path(Path::new(id));
    check_name(id).map_err(|why| WriteError::Format {
        path: root.path().to_path_buf(),
        message: format!("task_id: unsafe name `{id}`: {why}"),
    })?;
    let files = task_to_tree(task).map_err(|message| WriteError::Format {
        path: folder.clone(),
        message,
    })?;
    let dir = root.open_dir(Path::new(id), true).map_err(WriteError::fs)?;
    if !dir.list().map_err(WriteError::fs)?.is_empty() {
        return Err(WriteError::Exists(folder));
    }
    for (rel, bytes) in files {
        use std::io::Write;
        let mut file = dir
            .open_file(Path::new(&rel), pdl_fs::OpenMode::CreateNew)
            .map_err(WriteError::fs)?;
        file.write_all(&bytes)
            .map_err(|e| WriteError::io(folder.join(&rel), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_tree() -> TreeFiles {
        let manifest = r#"instance_id: pdl_open_demo_001-v1
task_id: pdl_open_demo_001
task_version: 1
tier: T1
domain: demo
problem_statement: |
  Something is wrong.

  Please fix it.
FAIL_TO_PASS:
- tests/hidden/test_hidden.py::test_fixed
PASS_TO_PASS:
- tests/public/test_public.py::test_ok
patch_policy_allowed:
- src/**
patch_policy_forbidden:
- tests/**
token_budget: 250000
hidden_test_count: 1
public_test_count: 1
graded_ladder_rungs:
- cheat.diff
reward_formula: 0.80*hidden_pass_fraction + 0.15*public_regression + 0.05*build_health
ladder:
- name: cheat.diff
  reward: 0.2
  note: does nothing useful
limits:
  test_timeout_s: 30
"#;
        let mut t = TreeFiles::new();
        t.insert(MANIFEST.into(), manifest.as_bytes().to_vec());
        t.insert("fixtures/src/__init__.py".into(), b"".to_vec());
        t.insert("fixtures/src/x.py".into(), b"X = 1\n".to_vec());
        t.insert(
            "hidden/test_hidden.py".into(),
            b"def test_fixed():\n    pass\n".to_vec(),
        );
        t.insert(
            GOLD.into(),
            b"--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n-X = 1\n+X = 2\n".to_vec(),
        );
        t.insert("ladder/cheat.diff".into(), b"".to_vec());
        t
    }

    #[test]
    fn tree_to_task_and_back_is_byte_exact() {
        let tree = sample_tree();
        let task = task_from_tree(&tree, "demo").unwrap();
        assert_eq!(task.row.files.len(), 2);
        assert_eq!(task.extras.ladder[0].reward, 0.2);
        assert_eq!(task.extras.limits.test_timeout_s, Some(30));
        assert!(task
            .row
            .test_patch
            .contains("+++ b/tests/hidden/test_hidden.py"));
        assert_eq!(task_to_tree(&task).unwrap(), tree);
    }

    #[test]
    fn non_canonical_manifest_survives_verbatim() {
        let mut tree = sample_tree();
        let text = String::from_utf8(tree[MANIFEST].clone()).unwrap();
        let odd = format!("# a comment\n{}", text.replace("tier: T1", "tier: 'T1'"));
        tree.insert(MANIFEST.into(), odd.clone().into_bytes());
        let task = task_from_tree(&tree, "demo").unwrap();
        assert_eq!(task.extras.manifest_yaml.as_deref(), Some(odd.as_str()));
        assert_eq!(task_to_tree(&task).unwrap(), tree);
        // Once the row changes, the stale verbatim text is not reused.
        let mut changed = task.clone();
        changed.row.tier = "T2".into();
        let back = task_to_tree(&changed).unwrap();
        assert!(String::from_utf8(back[MANIFEST].clone())
            .unwrap()
            .contains("tier: T2"));
    }

    #[test]
    fn certificates_and_reviews_folders_are_not_part_of_the_task() {
        let dir = tempfile::tempdir().unwrap();
        for (path, bytes) in sample_tree() {
            let at = dir.path().join(&path);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, bytes).unwrap();
        }
        let plain = read_tree_dir(dir.path()).unwrap();
        let certs = dir.path().join(CERTIFICATES_DIR);
        std::fs::create_dir(&certs).unwrap();
        std::fs::write(certs.join("agent-2026-01-02.json"), b"{}").unwrap();
        // Even a link there does not make the task unreadable.
        std::os::unix::fs::symlink("/etc/passwd", certs.join("link.json")).unwrap();
        assert_eq!(read_tree_dir(dir.path()).unwrap(), plain);
        let reviews = dir.path().join(REVIEWS_DIR);
        std::fs::create_dir(&reviews).unwrap();
        std::fs::write(reviews.join("fairness.md"), b"# review\n").unwrap();
        assert_eq!(read_tree_dir(dir.path()).unwrap(), plain);
        // Only the top-level folders are skipped.
        std::fs::create_dir_all(dir.path().join("fixtures/certificates")).unwrap();
        std::fs::write(dir.path().join("fixtures/certificates/x.txt"), b"x\n").unwrap();
        assert!(read_tree_dir(dir.path())
            .unwrap()
            .contains_key("fixtures/certificates/x.txt"));
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let mut tree = sample_tree();
        tree.insert("fixtures/data.bin".into(), vec![0xff, 0xfe, 0x00]);
        let err = task_from_tree(&tree, "tasks/demo").unwrap_err();
        assert_eq!(err.field.as_deref(), Some("fixtures/data.bin"));
        assert!(err.to_string().contains("not UTF-8"), "{err}");

        let mut tree = sample_tree();
        tree.remove("ladder/cheat.diff");
        let err = task_from_tree(&tree, "tasks/demo").unwrap_err();
        assert_eq!(err.field.as_deref(), Some("ladder/cheat.diff"));

        let mut tree = sample_tree();
        let text = String::from_utf8(tree[MANIFEST].clone()).unwrap();
        tree.insert(
            MANIFEST.into(),
            text.replace("token_budget: 250000", "token_budget: lots")
                .into_bytes(),
        );
        let err = task_from_tree(&tree, "tasks/demo").unwrap_err();
        assert_eq!(err.field.as_deref(), Some(MANIFEST));
        assert!(err.message.contains("token_budget"), "{err}");

        let mut tree = sample_tree();
        tree.insert(MANIFEST.into(), b"instance_id: [unclosed\n".to_vec());
        assert!(task_from_tree(&tree, "tasks/demo").is_err());
    }
}
