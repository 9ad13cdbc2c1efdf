//! Relative links from a report page to the files of a run folder.
//!
//! A path from a record becomes a link only when it is a plain relative path
//! (no scheme, no leading `/`, no `..`, no backslash or control character); every
//! byte outside the URL-unreserved set is percent-encoded, so a link can never
//! carry markup or a `javascript:` URL.

use std::path::{Component, Path};

/// A safe relative href for `path` (relative to the run folder), prefixed with
/// `prefix` (the way from the page's folder to the run folder, ending in `/`, or
/// empty). `None` when the path is not a plain relative path.
pub(crate) fn href(prefix: &str, path: &str) -> Option<String> {
    if path.is_empty()
        || path.starts_with('/')
        || path.contains('\\')
        || path.chars().any(char::is_control)
    {
        return None;
    }
    let segments: Vec<&str> = path.split('/').collect();
    if segments[0].contains(':') || segments.contains(&"..") {
        return None;
    }
    let encoded: Vec<String> = segments
        .iter()
        .filter(|s| !s.is_empty() && **s != ".")
        .map(|s| encode_segment(s))
        .collect();
    if encoded.is_empty() {
        return None;
    }
    Some(format!("{prefix}{}", encoded.join("/")))
}

fn encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The href prefix that leads from a page in `page_dir` to `run_dir`: empty when
/// they are the same folder, else a relative path ending in `/`. Both folders
/// must exist (they are compared after resolving symbolic links); when they
/// cannot be resolved, or one is not valid UTF-8, the prefix is empty.
pub(crate) fn prefix_from(page_dir: &Path, run_dir: &Path) -> String {
    let (Ok(from), Ok(to)) = (page_dir.canonicalize(), run_dir.canonicalize()) else {
        return String::new();
    };
    let names = |p: &Path| -> Option<Vec<String>> {
        p.components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_str().map(str::to_string)),
                _ => None,
            })
            .collect()
    };
    let (Some(from), Some(to)) = (names(&from), names(&to)) else {
        return String::new();
    };
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut prefix = "../".repeat(from.len() - common);
    for name in &to[common..] {
        prefix.push_str(&encode_segment(name));
        prefix.push('/');
    }
    prefix
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths_become_encoded_links() {
        assert_eq!(
            href("", "trajectories/t-1/builtin 0.jsonl").as_deref(),
            Some("trajectories/t-1/builtin%200.jsonl")
        );
        assert_eq!(
            href("../", "./patches/a\"<b>.diff").as_deref(),
            Some("../patches/a%22%3Cb%3E.diff")
        );
    }

    #[test]
    fn unsafe_paths_are_not_links() {
        for p in [
            "",
            "/etc/passwd",
            "javascript:alert(1)",
            "../secret",
            "a/../../b",
            "a\\b",
            "a\nb",
            "https://example.com/x",
        ] {
            assert_eq!(href("", p), None, "{p}");
        }
    }

    #[test]
    fn the_prefix_leads_from_the_page_to_the_run_folder() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run one");
        let inside = run.join("report");
        let beside = root.path().join("out");
        for d in [&inside, &beside] {
            std::fs::create_dir_all(d).unwrap();
        }
        assert_eq!(prefix_from(&run, &run), "");
        assert_eq!(prefix_from(&inside, &run), "../");
        assert_eq!(prefix_from(&beside, &run), "../run%20one/");
    }
}
