//! The patch policy ([`PatchPolicy`]): which changed paths reach the graded tree.
//!
//! Globs match repository-relative paths with `/` separators; `*` does not cross
//! `/`, `**` does. Forbidden wins over allowed. A change to a path that matches
//! neither is dropped (left out of the graded tree, listed in the record).

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// What the policy says about one changed path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathDecision {
    /// The change reaches the graded tree.
    Allowed,
    /// The change is forbidden: the submission is a policy violation.
    Forbidden,
    /// The change is left out of the graded tree.
    Dropped,
}

/// A task's allowed and forbidden globs, compiled.
#[derive(Debug, Clone)]
pub struct PatchPolicy {
    allowed: GlobSet,
    forbidden: GlobSet,
}

/// A glob that does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("patch policy glob `{glob}`: {reason}")]
pub struct PolicyError {
    /// The glob.
    pub glob: String,
    /// Why it does not compile.
    pub reason: String,
}

fn compile(globs: &[String]) -> Result<GlobSet, PolicyError> {
    let mut builder = GlobSetBuilder::new();
    for glob in globs {
        let compiled = GlobBuilder::new(glob)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| PolicyError {
                glob: glob.clone(),
                reason: e.kind().to_string(),
            })?;
        builder.add(compiled);
    }
    builder.build().map_err(|e| PolicyError {
        glob: globs.join(", "),
        reason: e.to_string(),
    })
}

/// True when a path could leave the repository: absolute, `..`, empty parts, NUL
/// or a backslash (which another platform would read as a separator).
pub fn is_unsafe_path(path: &str) -> bool {
    path.is_empty()
        || path.starts_with('/')
        || path.contains('\\')
        || path.contains('\0')
        || path
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
}

impl PatchPolicy {
    /// Compiles a task's globs.
    pub fn new(allowed: &[String], forbidden: &[String]) -> Result<Self, PolicyError> {
        Ok(PatchPolicy {
            allowed: compile(allowed)?,
            forbidden: compile(forbidden)?,
        })
    }

    /// The decision for one repository-relative path. Unsafe paths are
    /// forbidden, and so is a path Python would import in place of a forbidden
    /// module ([`PatchPolicy::shadows_forbidden`]).
    pub fn decide(&self, path: &str) -> PathDecision {
        if is_unsafe_path(path) || self.forbidden.is_match(path) || self.shadows_forbidden(path) {
            PathDecision::Forbidden
        } else if self.allowed.is_match(path) {
            PathDecision::Allowed
        } else {
            PathDecision::Dropped
        }
    }
}

impl PatchPolicy {
    /// The module names of the pristine files the policy forbids. A *new*
    /// file defining a module of one of these names, anywhere in the tree, can
    /// be imported in the forbidden module's place (a package's `__path__` or
    /// `sys.path` pointed at its folder): see [`ForbiddenModules::names`].
    pub fn forbidden_modules<'a>(&self, pristine: &[&'a str]) -> ForbiddenModules<'a> {
        ForbiddenModules(
            pristine
                .iter()
                .filter(|known| self.decide(known) == PathDecision::Forbidden)
                .filter_map(|known| module_stem(known))
                .collect(),
        )
    }

    /// True when `path` would be imported instead of a module whose file the
    /// policy forbids: a file inside a folder named like a forbidden `x.py`
    /// (the package `x/` wins over the module), an extension module `x.so` or
    /// `x.<tag>.so` beside it (extensions are tried first), or a module `x.py`
    /// beside a forbidden package `x/` (a module wins over a folder without
    /// `__init__.py`).
    fn shadows_forbidden(&self, path: &str) -> bool {
        let parts: Vec<&str> = path.split('/').collect();
        for end in 1..parts.len() {
            if self
                .forbidden
                .is_match(format!("{}.py", parts[..end].join("/")))
            {
                return true;
            }
        }
        let (dir, name) = match path.rsplit_once('/') {
            Some((dir, name)) => (format!("{dir}/"), name),
            None => (String::new(), path),
        };
        if name.ends_with(".so") {
            let stem = name.split('.').next().unwrap_or(name);
            if self.forbidden.is_match(format!("{dir}{stem}.py")) {
                return true;
            }
        }
        if let Some(stem) = name.strip_suffix(".py") {
            if self.forbidden.is_match(format!("{dir}{stem}/__init__.py")) {
                return true;
            }
        }
        false
    }
}

/// The module names of a tree's forbidden files ([`PatchPolicy::forbidden_modules`]).
#[derive(Debug, Clone, Default)]
pub struct ForbiddenModules<'a>(std::collections::BTreeSet<&'a str>);

impl ForbiddenModules<'_> {
    /// True when the new file `path` defines a module named like a forbidden one.
    pub fn names(&self, path: &str) -> bool {
        module_stem(path).is_some_and(|stem| self.0.contains(stem))
    }
}

/// The module name a file defines: `x` for `…/x.py`, `…/x.<tag>.so` and
/// `…/x/__init__.py`.
fn module_stem(path: &str) -> Option<&str> {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    if name == "__init__.py" {
        return dir.rsplit('/').next().filter(|d| !d.is_empty());
    }
    if let Some(stem) = name.strip_suffix(".py") {
        return Some(stem);
    }
    if name.ends_with(".so") {
        return name.split('.').next();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_module_named_like_a_forbidden_one_is_found_anywhere() {
        // Third red team: `__path__.insert(0, __path__[0] + "/_alt")` in an
        // allowed `__init__.py` loaded `src/_alt/snapshot.py` in place of the
        // forbidden `src/snapshot.py`.
        let p = policy();
        let pristine = ["src/snapshot.py", "src/service.py", "src/__init__.py"];
        let forbidden = p.forbidden_modules(&pristine);
        assert!(forbidden.names("src/_alt/snapshot.py"));
        assert!(forbidden.names("vendor/snapshot/__init__.py"));
        assert!(!forbidden.names("src/_alt/service.py"));
        assert!(!forbidden.names("src/snapshots.py"));
        assert_eq!(module_stem("src/x/__init__.py"), Some("x"));
        assert_eq!(
            module_stem("src/x.cpython-311-x86_64-linux-gnu.so"),
            Some("x")
        );
        assert_eq!(module_stem("README.md"), None);
    }

    #[test]
    fn a_path_imported_in_place_of_a_forbidden_module_is_forbidden() {
        // Red-team finding: `src/snapshot/__init__.py` made the tests import a
        // package in place of the forbidden `src/snapshot.py`.
        let p = policy();
        for shadow in [
            "src/snapshot/__init__.py",
            "src/snapshot/core.py",
            "src/snapshot.so",
            "src/snapshot.cpython-311-x86_64-linux-gnu.so",
        ] {
            assert_eq!(p.decide(shadow), PathDecision::Forbidden, "{shadow}");
        }
        for fine in ["src/snapshots.py", "src/snapshot_util.py", "src/snap/x.py"] {
            assert_eq!(p.decide(fine), PathDecision::Allowed, "{fine}");
        }
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let package = PatchPolicy::new(&s(&["src/**"]), &s(&["src/wal/**"])).unwrap();
        assert_eq!(package.decide("src/wal.py"), PathDecision::Forbidden);
        assert_eq!(package.decide("src/walk.py"), PathDecision::Allowed);
    }

    fn policy() -> PatchPolicy {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        PatchPolicy::new(
            &s(&["src/**", "*.cfg"]),
            &s(&[
                "tests/**",
                "requirements.lock",
                "pyproject.toml",
                "src/snapshot.py",
            ]),
        )
        .unwrap()
    }

    #[test]
    fn double_star_crosses_separators_and_single_star_does_not() {
        let p = policy();
        assert_eq!(p.decide("src/a.py"), PathDecision::Allowed);
        assert_eq!(p.decide("src/deep/er/a.py"), PathDecision::Allowed);
        assert_eq!(p.decide("setup.cfg"), PathDecision::Allowed);
        assert_eq!(p.decide("conf/setup.cfg"), PathDecision::Dropped);
    }

    #[test]
    fn forbidden_wins_over_allowed() {
        let p = policy();
        assert_eq!(p.decide("src/snapshot.py"), PathDecision::Forbidden);
        assert_eq!(p.decide("tests/hidden/test_x.py"), PathDecision::Forbidden);
        assert_eq!(p.decide("requirements.lock"), PathDecision::Forbidden);
    }

    #[test]
    fn unmatched_paths_are_dropped() {
        let p = policy();
        assert_eq!(p.decide("README.md"), PathDecision::Dropped);
        assert_eq!(p.decide("conftest.py"), PathDecision::Dropped);
        assert_eq!(p.decide("scratch/notes.txt"), PathDecision::Dropped);
    }

    #[test]
    fn escaping_paths_are_forbidden() {
        let p = policy();
        for bad in [
            "../etc/passwd",
            "/etc/passwd",
            "src/../tests/x.py",
            "src//a.py",
            "src\\a.py",
            "",
        ] {
            assert_eq!(p.decide(bad), PathDecision::Forbidden, "{bad}");
        }
    }

    #[test]
    fn a_bad_glob_is_named() {
        let err = PatchPolicy::new(&["src/[".to_string()], &[]).unwrap_err();
        assert_eq!(err.glob, "src/[");
    }
}
