//! Names and paths a dataset may use, and the bounds on what is read from it.
//!
//! A dataset is trusted for its content, never for its effects on the host:
//! the harness turns some of its strings into file names on the host (task IDs
//! become folders, `files` and the hidden tests of `test_patch` become files of
//! a tree the harness writes). Every such string is checked here when the
//! dataset loads, in all three formats, so that a bad one is a task defect that
//! names the task, the field and the path, and never reaches a file system call.
//!
//! - A **name** (`task_id`, `instance_id`, a rung name) matches
//!   `[A-Za-z0-9][A-Za-z0-9._-]{0,127}` ([`check_name`]).
//! - A **repository path** (`files`, `test_patch`) is relative, `/`-separated,
//!   with no empty, `.` or `..` component, no component named `.git` (in any
//!   case), no backslash, no NUL or other control character, each component at
//!   most [`MAX_COMPONENT_BYTES`] bytes and the whole at most
//!   [`MAX_PATH_BYTES`] ([`check_repo_path`]).

use std::fmt;

/// The longest name, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// The longest component of a repository path, in bytes.
pub const MAX_COMPONENT_BYTES: usize = 255;
/// The longest repository path, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;

/// The largest file of a task tree (stat before read).
pub const MAX_TREE_FILE_BYTES: u64 = 8 << 20;
/// The most bytes one task may hold, in any format (a task tree's files, a
/// JSONL line, a Parquet row's values).
pub const MAX_TASK_BYTES: u64 = 64 << 20;
/// The largest dataset file (JSONL or Parquet) read.
pub const MAX_DATASET_FILE_BYTES: u64 = 2 << 30;
/// The largest `manifest.yaml` (or its verbatim copy in the extras).
pub const MAX_MANIFEST_BYTES: usize = 256 << 10;
/// The deepest nesting of flow collections (`[`, `{`) in a manifest.
pub const MAX_YAML_DEPTH: usize = 64;

/// The largest `limits.test_timeout_s`, in seconds.
pub const MAX_TEST_TIMEOUT_S: u64 = 3600;

/// Why a name or path is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsafe {
    /// Empty.
    Empty,
    /// Longer than its bound.
    TooLong {
        /// The bound, in bytes.
        limit: usize,
    },
    /// A component longer than [`MAX_COMPONENT_BYTES`].
    ComponentTooLong,
    /// Starts with `/`.
    Absolute,
    /// An empty, `.` or `..` component.
    NotNormal,
    /// A component named `.git`.
    Git,
    /// A backslash.
    Backslash,
    /// A NUL or another control character.
    Control,
    /// A character a name may not hold.
    BadCharacter(char),
    /// A name that does not start with a letter or digit.
    BadStart,
}

impl fmt::Display for Unsafe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsafe::Empty => f.write_str("it is empty"),
            Unsafe::TooLong { limit } => write!(f, "it is longer than {limit} bytes"),
            Unsafe::ComponentTooLong => {
                write!(f, "a component is longer than {MAX_COMPONENT_BYTES} bytes")
            }
            Unsafe::Absolute => f.write_str("it is absolute"),
            Unsafe::NotNormal => f.write_str("it has an empty, `.` or `..` component"),
            Unsafe::Git => f.write_str("it has a component named `.git`"),
            Unsafe::Backslash => f.write_str("it has a backslash"),
            Unsafe::Control => f.write_str("it has a NUL or another control character"),
            Unsafe::BadCharacter(c) => write!(
                f,
                "it holds {} (names use letters, digits, `.`, `_` and `-`)",
                c.escape_default()
            ),
            Unsafe::BadStart => f.write_str("it must start with a letter or a digit"),
        }
    }
}

/// Checks a name used as a folder or file name: `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`.
pub fn check_name(name: &str) -> Result<(), Unsafe> {
    let first = name.chars().next().ok_or(Unsafe::Empty)?;
    if name.len() > MAX_NAME_BYTES {
        return Err(Unsafe::TooLong {
            limit: MAX_NAME_BYTES,
        });
    }
    if !first.is_ascii_alphanumeric() {
        return Err(Unsafe::BadStart);
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        Some(c) => Err(Unsafe::BadCharacter(c)),
        None => Ok(()),
    }
}

/// Checks a repository-relative path the harness writes on the host.
pub fn check_repo_path(path: &str) -> Result<(), Unsafe> {
    if path.is_empty() {
        return Err(Unsafe::Empty);
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(Unsafe::TooLong {
            limit: MAX_PATH_BYTES,
        });
    }
    if path.chars().any(char::is_control) {
        return Err(Unsafe::Control);
    }
    if path.starts_with('/') {
        return Err(Unsafe::Absolute);
    }
    if path.contains('\\') {
        return Err(Unsafe::Backslash);
    }
    for component in path.split('/') {
        if component.is_empty() || component == "." || component == ".." {
            return Err(Unsafe::NotNormal);
        }
        if component.eq_ignore_ascii_case(".git") {
            return Err(Unsafe::Git);
        }
        if component.len() > MAX_COMPONENT_BYTES {
            return Err(Unsafe::ComponentTooLong);
        }
    }
    Ok(())
}

/// Checks that a YAML document is small and shallow enough to parse quickly:
/// at most [`MAX_MANIFEST_BYTES`], and flow collections nested at most
/// [`MAX_YAML_DEPTH`] deep. The scan is a cheap upper bound (brackets inside
/// quoted text count too); a real manifest is far below it.
pub fn check_yaml_bounds(text: &str) -> Result<(), String> {
    if text.len() > MAX_MANIFEST_BYTES {
        return Err(format!(
            "{} bytes; a manifest may hold at most {MAX_MANIFEST_BYTES}",
            text.len()
        ));
    }
    let mut depth = 0usize;
    for b in text.bytes() {
        match b {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_YAML_DEPTH {
                    return Err(format!(
                        "collections nested more than {MAX_YAML_DEPTH} deep"
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in [
            "pdl_open_retry_cap_001",
            "a",
            "x-v1",
            "cheat.diff",
            "A.b_c-9",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        let long = "a".repeat(129);
        let cases: [(&str, Unsafe); 9] = [
            ("", Unsafe::Empty),
            (".", Unsafe::BadStart),
            ("..", Unsafe::BadStart),
            ("../x", Unsafe::BadStart),
            ("/tmp/x", Unsafe::BadStart),
            ("a/b", Unsafe::BadCharacter('/')),
            ("a\u{1b}[2J", Unsafe::BadCharacter('\u{1b}')),
            ("a b", Unsafe::BadCharacter(' ')),
            (&long, Unsafe::TooLong { limit: 128 }),
        ];
        for (name, want) in cases {
            assert_eq!(check_name(name), Err(want), "{name:?}");
        }
        assert_eq!(check_name(&"a".repeat(128)), Ok(()));
    }

    #[test]
    fn repo_paths() {
        for ok in [
            "src/x.py",
            "tests/hidden/sub/test_a.py",
            ".gitignore",
            ".github/workflows/ci.yml",
            "a.git/b",
            "é/ü.py",
        ] {
            assert_eq!(check_repo_path(ok), Ok(()), "{ok}");
        }
        let long_component = format!("src/{}", "a".repeat(256));
        let long_path = "ab/".repeat(400) + "x";
        let cases: Vec<(&str, Unsafe)> = vec![
            ("", Unsafe::Empty),
            ("/etc/passwd", Unsafe::Absolute),
            ("tests/hidden/../../x", Unsafe::NotNormal),
            ("a//b", Unsafe::NotNormal),
            ("./a", Unsafe::NotNormal),
            ("a/", Unsafe::NotNormal),
            (".git/config", Unsafe::Git),
            ("sub/.GIT/hooks/x", Unsafe::Git),
            ("a\\b", Unsafe::Backslash),
            ("a\0b", Unsafe::Control),
            ("a\nb", Unsafe::Control),
            ("a\u{1b}b", Unsafe::Control),
            ("a\u{85}b", Unsafe::Control),
            (&long_component, Unsafe::ComponentTooLong),
            (&long_path, Unsafe::TooLong { limit: 1024 }),
        ];
        for (path, want) in cases {
            assert_eq!(check_repo_path(path), Err(want), "{path:?}");
        }
        assert_eq!(check_repo_path(&format!("src/{}", "a".repeat(255))), Ok(()));
    }

    #[test]
    fn yaml_bounds() {
        assert!(check_yaml_bounds("a: [1, {b: [2]}]\n").is_ok());
        let deep = format!("deep: {}{}\n", "[".repeat(65), "]".repeat(65));
        assert!(check_yaml_bounds(&deep).unwrap_err().contains("nested"));
        let ok = format!("deep: {}{}\n", "[".repeat(64), "]".repeat(64));
        assert!(check_yaml_bounds(&ok).is_ok());
        let big = "a: b\n".repeat(60_000);
        assert!(check_yaml_bounds(&big).unwrap_err().contains("at most"));
    }
}
