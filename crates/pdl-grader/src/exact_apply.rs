//! Applying a patch in memory when it applies exactly where it says
//! ([`apply_exactly`]), with no process started.
//!
//! `git apply` tries each hunk first at the line its header names (counting
//! the lines earlier hunks added or removed), and takes that place when the
//! hunk's old lines are there byte for byte. When every hunk of every file
//! fits like that, the result is known without running git: this module
//! computes it. Anything else (an offset, fuzz, a binary or mode change, a
//! rename, a path or tree git might treat otherwise) answers `None`, and the
//! grader hands the patch to `git apply` in the sandbox as before
//! ([`crate::apply::apply_in_sandbox`]). The answer is therefore never one git
//! would not give; the differential tests below hold it to that.

use std::collections::{BTreeMap, BTreeSet};

use pdl_task::diff::{ChangeKind, FilePatch, Hunk, HunkLine, PatchSet};
use pdl_task::RepoFile;

/// What the patch does to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExactChange {
    /// The file (new or changed) holds these bytes.
    Write {
        /// Repository-relative path.
        path: String,
        /// The whole new content.
        content: Vec<u8>,
    },
    /// The file is gone.
    Delete {
        /// Repository-relative path.
        path: String,
    },
}

/// The changes `set` makes to the pristine `files`, when every file section
/// is a plain text change that applies exactly at its stated place; `None`
/// when `git apply` has to decide.
pub fn apply_exactly(files: &[RepoFile], set: &PatchSet) -> Option<Vec<ExactChange>> {
    if files.iter().any(|f| is_attributes(&f.path)) {
        // .gitattributes could make git convert what it reads and writes.
        return None;
    }
    let pristine: BTreeMap<&str, &str> = files
        .iter()
        .map(|f| (f.path.as_str(), f.content.as_str()))
        .collect();
    let mut touched = BTreeSet::new();
    let mut changes = Vec::with_capacity(set.files.len());
    for section in &set.files {
        if !section.raw.starts_with("diff --git ") || section.binary {
            return None;
        }
        let change = match section.kind {
            ChangeKind::Added => added(section, &pristine)?,
            ChangeKind::Deleted => deleted(section, &pristine)?,
            ChangeKind::Modified => modified(section, &pristine)?,
            ChangeKind::Renamed | ChangeKind::Copied => return None,
        };
        let path = match &change {
            ExactChange::Write { path, .. } | ExactChange::Delete { path } => path.clone(),
        };
        if !touched.insert(path) {
            // Two sections for one file: git applies them in turn; leave it to git.
            return None;
        }
        changes.push(change);
    }
    Some(changes)
}

/// Writes `changes` into `tree`, a pristine tree the harness just wrote,
/// never through a link.
pub fn write_changes(
    tree: &std::path::Path,
    changes: &[ExactChange],
) -> Result<(), pdl_fs::FsError> {
    let dir = pdl_fs::Dir::open(tree)?;
    for change in changes {
        match change {
            ExactChange::Write { path, content } => {
                dir.write(std::path::Path::new(path), content)?
            }
            ExactChange::Delete { path } => {
                let rel = std::path::Path::new(path);
                dir.remove_file(rel)?;
                // git removes the folders the deletion leaves empty.
                let mut parent = rel.parent();
                while let Some(folder) = parent.filter(|p| !p.as_os_str().is_empty()) {
                    if std::fs::remove_dir(tree.join(folder)).is_err() {
                        break;
                    }
                    parent = folder.parent();
                }
            }
        }
    }
    Ok(())
}

fn is_attributes(path: &str) -> bool {
    path.rsplit('/').next() == Some(".gitattributes")
}

/// A path git takes as it is: relative, no empty, `.` or `..` component, no
/// `.git` folder, no control character, not an attributes file, and short
/// enough for any file system (a name of at most 255 bytes, a path of at most
/// 1024).
fn plain_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 1024
        && !path.starts_with('/')
        && path.split('/').all(|c| c.len() <= 255)
        && !path.chars().any(char::is_control)
        && !is_attributes(path)
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.eq_ignore_ascii_case(".git"))
}

/// The mode of a plain, non-executable file, or no mode at all.
fn plain_mode(mode: &Option<String>) -> bool {
    matches!(mode.as_deref(), None | Some("100644"))
}

fn added(section: &FilePatch, pristine: &BTreeMap<&str, &str>) -> Option<ExactChange> {
    let path = section.new_path.as_deref()?;
    if section.old_path.is_some() || section.old_mode.is_some() || !plain_mode(&section.new_mode) {
        return None;
    }
    if !plain_path(path) || pristine.contains_key(path) {
        return None;
    }
    // Neither a file where a folder of the path would be, nor a folder at the path.
    let folder = format!("{path}/");
    if pristine.keys().any(|p| {
        p.starts_with(&folder)
            || (path.starts_with(p) && path.as_bytes().get(p.len()) == Some(&b'/'))
    }) {
        return None;
    }
    let content = match section.hunks.as_slice() {
        [] => Vec::new(),
        [hunk] if hunk.old_start == 0 && hunk.old_count == 0 => {
            let (pre, post) = images(hunk);
            if !pre.is_empty() {
                return None;
            }
            post.concat()
        }
        _ => return None,
    };
    Some(ExactChange::Write {
        path: path.to_string(),
        content,
    })
}

fn deleted(section: &FilePatch, pristine: &BTreeMap<&str, &str>) -> Option<ExactChange> {
    let path = section.old_path.as_deref()?;
    if section.new_path.is_some() || section.new_mode.is_some() || !plain_mode(&section.old_mode) {
        return None;
    }
    if !plain_path(path) {
        return None;
    }
    let old = pristine.get(path)?.as_bytes();
    let removed = match section.hunks.as_slice() {
        [] => Vec::new(),
        [hunk] => {
            let (pre, post) = images(hunk);
            if !post.is_empty() {
                return None;
            }
            pre.concat()
        }
        _ => return None,
    };
    // git refuses a deletion that leaves content behind.
    (removed == old).then(|| ExactChange::Delete {
        path: path.to_string(),
    })
}

fn modified(section: &FilePatch, pristine: &BTreeMap<&str, &str>) -> Option<ExactChange> {
    let path = section.new_path.as_deref()?;
    if section.old_path.as_deref() != Some(path)
        || section.old_mode != section.new_mode
        || !plain_mode(&section.old_mode)
        || !plain_path(path)
        || section.hunks.is_empty()
    {
        return None;
    }
    let old = pristine.get(path)?.as_bytes();
    let mut image: Vec<Vec<u8>> = old
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    // Lines an earlier hunk wrote: git never matches a later hunk over them.
    let mut patched = vec![false; image.len()];
    for hunk in &section.hunks {
        let (pre, post) = images(hunk);
        let trailing = hunk
            .lines
            .iter()
            .rev()
            .filter(|l| !matches!(l, HunkLine::NoNewline))
            .take_while(|l| matches!(l, HunkLine::Context(_)))
            .count();
        let match_beginning = hunk.old_start <= 1;
        let match_end = trailing == 0;
        // Where git tries first.
        let at = if match_beginning {
            0
        } else if match_end {
            image.len().checked_sub(pre.len())?
        } else {
            usize::try_from(hunk.new_start.checked_sub(1)?).ok()?
        };
        let end = at.checked_add(pre.len())?;
        if end > image.len()
            || (match_end && end != image.len())
            || patched[at..end].iter().any(|&p| p)
            || image[at..end] != pre[..]
        {
            return None;
        }
        let written = post.len();
        image.splice(at..end, post);
        patched.splice(at..end, std::iter::repeat_n(true, written));
    }
    // A line without its newline anywhere but at the end is a broken image.
    if image.iter().rev().skip(1).any(|l| !l.ends_with(b"\n")) {
        return None;
    }
    Some(ExactChange::Write {
        path: path.to_string(),
        content: image.concat(),
    })
}

/// A hunk's old lines (context and removed) and new lines (context and
/// added), each with its newline unless the patch says it has none.
fn images(hunk: &Hunk) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut pre: Vec<Vec<u8>> = Vec::new();
    let mut post: Vec<Vec<u8>> = Vec::new();
    // Which images the previous line went to, for a "no newline" marker.
    let (mut in_pre, mut in_post) = (false, false);
    for line in &hunk.lines {
        let with_newline = |text: &str| {
            let mut bytes = Vec::with_capacity(text.len() + 1);
            bytes.extend_from_slice(text.as_bytes());
            bytes.push(b'\n');
            bytes
        };
        match line {
            HunkLine::Context(text) => {
                pre.push(with_newline(text));
                post.push(with_newline(text));
                (in_pre, in_post) = (true, true);
            }
            HunkLine::Removed(text) => {
                pre.push(with_newline(text));
                (in_pre, in_post) = (true, false);
            }
            HunkLine::Added(text) => {
                post.push(with_newline(text));
                (in_pre, in_post) = (false, true);
            }
            HunkLine::NoNewline => {
                if in_pre {
                    if let Some(last) = pre.last_mut() {
                        last.pop();
                    }
                }
                if in_post {
                    if let Some(last) = post.last_mut() {
                        last.pop();
                    }
                }
                (in_pre, in_post) = (false, false);
            }
        }
    }
    (pre, post)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdl_task::diff::parse_patch;
    use std::path::Path;
    use std::process::Command;

    fn files(list: &[(&str, &str)]) -> Vec<RepoFile> {
        list.iter()
            .map(|(p, c)| RepoFile {
                path: p.to_string(),
                content: c.to_string(),
            })
            .collect()
    }

    fn exact(files: &[RepoFile], patch: &str) -> Option<Vec<ExactChange>> {
        apply_exactly(files, &parse_patch(patch).unwrap())
    }

    /// What `git apply` (the grader's first attempt: no fuzz, no recount)
    /// makes of `patch` on `files`: every file of the resulting tree, or
    /// `None` when git refuses.
    fn git_result(files: &[RepoFile], patch: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        crate::workspace::materialize(files, &tree).unwrap();
        std::fs::write(dir.path().join("p.diff"), patch).unwrap();
        let status = crate::apply::git_command(&tree)
            .args(["apply", "--whitespace=nowarn", "-p1"])
            .arg(dir.path().join("p.diff"))
            .output()
            .unwrap();
        status.status.success().then(|| read_tree(&tree))
    }

    fn read_tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let rel = path.strip_prefix(root).unwrap().display().to_string();
                    out.insert(rel, std::fs::read(&path).unwrap());
                }
            }
        }
        out
    }

    fn ours(files: &[RepoFile], changes: &[ExactChange]) -> BTreeMap<String, Vec<u8>> {
        let mut tree: BTreeMap<String, Vec<u8>> = files
            .iter()
            .map(|f| (f.path.clone(), f.content.as_bytes().to_vec()))
            .collect();
        for change in changes {
            match change {
                ExactChange::Write { path, content } => {
                    tree.insert(path.clone(), content.clone());
                }
                ExactChange::Delete { path } => {
                    tree.remove(path);
                }
            }
        }
        tree
    }

    /// Whenever the exact applier answers, git gives the same tree.
    fn agrees_with_git(files: &[RepoFile], patch: &str) -> bool {
        let Some(changes) = exact(files, patch) else {
            return false;
        };
        assert_eq!(
            git_result(files, patch).as_ref(),
            Some(&ours(files, &changes)),
            "git disagrees on:\n{patch}"
        );
        true
    }

    fn diff_of(before: &[RepoFile], after: &[RepoFile], context: u32) -> String {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        crate::workspace::materialize(before, &a).unwrap();
        crate::workspace::materialize(after, &b).unwrap();
        let out = Command::new("git")
            .current_dir(dir.path())
            .args(["diff", "--no-index", "--no-color", "--no-ext-diff"])
            .arg(format!("-U{context}"))
            .args(["a", "b"])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        // The folders themselves are the a/ and b/ of the paths.
        let text = String::from_utf8(out.stdout).unwrap();
        text.split_inclusive('\n')
            .map(|line| {
                if line.starts_with("diff --git ")
                    || line.starts_with("--- ")
                    || line.starts_with("+++ ")
                {
                    line.replace(" a/a/", " a/")
                        .replace(" a/b/", " a/")
                        .replace(" b/b/", " b/")
                        .replace(" b/a/", " b/")
                } else {
                    line.to_string()
                }
            })
            .collect()
    }

    #[test]
    fn modification_creation_and_deletion_agree_with_git() {
        let before = files(&[
            (
                "src/a.py",
                "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n",
            ),
            ("src/gone.py", "x = 1\ny = 2\n"),
            ("README", "no newline at end"),
        ]);
        let after = files(&[
            (
                "src/a.py",
                "zero\none\ntwo\nthree\nfour\nFIVE\nsix\nseven\neight\nnine\nten\neleven\n",
            ),
            ("src/new/b.py", "print('hi')\n"),
            ("README", "no newline at end\nnow there is one\n"),
            ("empty.txt", ""),
        ]);
        for context in [0, 1, 3] {
            let patch = diff_of(&before, &after, context);
            if context == 0 {
                // -U0 hunks have no context to anchor them: git is asked.
                let _ = exact(&before, &patch);
                continue;
            }
            assert!(
                agrees_with_git(&before, &patch),
                "context {context}:\n{patch}"
            );
        }
    }

    #[test]
    fn every_change_at_the_end_of_a_file_without_newline_agrees_with_git() {
        let before = files(&[("a.txt", "a\nb\nc")]);
        for after in [
            "a\nb\nC",
            "a\nb\nc\n",
            "a\nb\nc\nd",
            "a\nB\nc",
            "x\na\nb\nc",
        ] {
            let patch = diff_of(&before, &files(&[("a.txt", after)]), 3);
            assert!(agrees_with_git(&before, &patch), "{after:?}:\n{patch}");
        }
    }

    #[test]
    fn a_hunk_away_from_its_stated_line_is_left_to_git() {
        let before = files(&[("a.txt", "1\n2\n3\n4\n5\n6\n7\n8\n9\n")]);
        let shifted = "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -3,3 +3,3 @@\n 4\n-5\n+five\n 6\n";
        assert_eq!(exact(&before, shifted), None);
        assert!(
            git_result(&before, shifted).is_some(),
            "git finds it by offset"
        );
    }

    #[test]
    fn what_git_might_treat_otherwise_is_left_to_git() {
        let before = files(&[("a.txt", "1\n2\n3\n"), ("x/.gitattributes", "* text\n")]);
        let plain = "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n";
        assert_eq!(exact(&before, plain), None, "attributes in the tree");
        let before = files(&[("a.txt", "1\n2\n3\n")]);
        assert!(exact(&before, plain).is_some());
        let cases = [
            // A mode change.
            "diff --git a/a.txt b/a.txt\nold mode 100644\nnew mode 100755\n",
            // An executable new file.
            "diff --git a/b.sh b/b.sh\nnew file mode 100755\n--- /dev/null\n+++ b/b.sh\n@@ -0,0 +1 @@\n+x\n",
            // A rename.
            "diff --git a/a.txt b/c.txt\nsimilarity index 100%\nrename from a.txt\nrename to c.txt\n",
            // A file that is already there.
            "diff --git a/a.txt b/a.txt\nnew file mode 100644\n--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+x\n",
            // A file under a file.
            "diff --git a/a.txt/b b/a.txt/b\nnew file mode 100644\n--- /dev/null\n+++ b/a.txt/b\n@@ -0,0 +1 @@\n+x\n",
            // A .git folder.
            "diff --git a/.git/config b/.git/config\nnew file mode 100644\n--- /dev/null\n+++ b/.git/config\n@@ -0,0 +1 @@\n+x\n",
            // A deletion that leaves content behind.
            "diff --git a/a.txt b/a.txt\ndeleted file mode 100644\n--- a/a.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-1\n-2\n",
            // Context that is not there.
            "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n 1\n-TWO\n+two\n 3\n",
            // The same file twice.
            "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\ndiff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n 1\n-two\n+2\n 3\n",
            // No git header.
            "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n",
        ];
        for patch in cases {
            let Ok(set) = parse_patch(patch) else {
                continue;
            };
            assert_eq!(apply_exactly(&before, &set), None, "{patch}");
        }
    }

    #[test]
    fn hunks_over_lines_an_earlier_hunk_wrote_are_left_to_git() {
        let before = files(&[("a.txt", "a\nb\nc\nd\n")]);
        // The second hunk claims the line the first one wrote.
        let patch = "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+x\n@@ -2,2 +2,2 @@\n x\n-c\n+y\n";
        assert_eq!(exact(&before, patch), None);
    }

    #[test]
    fn crlf_files_agree_with_git() {
        let before = files(&[("w.txt", "one\r\ntwo\r\nthree\r\n")]);
        let after = files(&[("w.txt", "one\r\n2\r\nthree\r\n")]);
        let patch = diff_of(&before, &after, 3);
        assert!(agrees_with_git(&before, &patch), "{patch}");
    }

    /// Random files, random edits, diffs made by git with one to three lines
    /// of context: the exact applier takes nearly all of them, and git agrees
    /// on every one it takes.
    #[test]
    fn random_edits_agree_with_git() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        // Few distinct lines, so that hunks could match in many places.
        let words = ["a", "b", "c", "", "d", "  e", "a", "f\r"];
        let mut taken = 0;
        let rounds = 400;
        for _ in 0..rounds {
            let lines: Vec<String> = (0..1 + next(30))
                .map(|_| words[next(words.len() as u64) as usize].replace("\\r", "\r"))
                .collect();
            let mut edited = lines.clone();
            for _ in 0..1 + next(4) {
                let at = next(edited.len() as u64 + 1) as usize;
                match next(3) {
                    0 if at < edited.len() => {
                        edited.remove(at);
                    }
                    1 if at < edited.len() => edited[at] = format!("x{}", next(9)),
                    _ => edited.insert(at, format!("new{}", next(9))),
                }
            }
            let join = |v: &[String], newline_at_end: bool| {
                let mut text = v.join("\n");
                if newline_at_end && !text.is_empty() {
                    text.push('\n');
                }
                text
            };
            let before = files(&[("f.txt", &join(&lines, next(4) != 0))]);
            let after = files(&[("f.txt", &join(&edited, next(4) != 0))]);
            let patch = diff_of(&before, &after, 1 + next(3) as u32);
            if patch.is_empty() {
                continue;
            }
            if agrees_with_git(&before, &patch) {
                taken += 1;
            } else {
                // Left to git: git must still be able to apply it.
                assert!(git_result(&before, &patch).is_some(), "{patch}");
            }
        }
        assert!(
            taken * 10 >= rounds * 8,
            "only {taken} of {rounds} applied in memory"
        );
    }

    /// Every gold patch and rung of the bundled suite applies in memory, to
    /// the very tree git makes of it.
    #[test]
    fn the_bundled_suite_applies_exactly_and_as_git_does() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tasks");
        let dataset = pdl_task::Dataset::load(&root).unwrap();
        assert!(dataset.tasks.len() >= 18);
        let mut patches = 0;
        for task in &dataset.tasks {
            let row = &task.row;
            let mut all = vec![row.patch.clone()];
            all.extend(task.extras.ladder.iter().map(|r| r.diff.clone()));
            for patch in all {
                assert!(
                    agrees_with_git(&row.files, &patch),
                    "{}: not applied exactly:\n{patch}",
                    row.instance_id
                );
                patches += 1;
            }
        }
        assert!(patches > 30);
    }
}
