//! Python environments ([`EnvManager`]): one virtual environment per distinct
//! `requirements.lock` content, with a pinned pytest, built once and cached.
//!
//! The interpreter is found on the machine ([`find_interpreter`]). Environments
//! are built with uv when it is on `PATH` (or named by `PDL_SWE_UV`), otherwise
//! with the interpreter's own `venv` and pip, and their bytecode is compiled at
//! install time so no test run has to. A finished environment carries a
//! `pdl-env.json` marker with its digest; a cached one is used as is, offline.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::record::EnvironmentInfo;

/// The harness's own test dependencies, pinned. Conditional lines serve older
/// interpreters.
pub const HARNESS_REQUIREMENTS: &str = "\
pytest==8.3.5
pluggy==1.5.0
iniconfig==2.0.0
packaging==24.2
exceptiongroup==1.2.2; python_version < \"3.11\"
tomli==2.0.1; python_version < \"3.11\"
";

/// The same pins with the SHA-256 of their (pure Python, universal) wheels,
/// for a task whose own lock carries hashes: installers check every
/// requirement's hash once one has any.
pub const HARNESS_REQUIREMENTS_HASHED: &str = "\
pytest==8.3.5 --hash=sha256:c69214aa47deac29fad6c2a4f590b9c4a9fdb16a403176fe154b79c0b4d4d820
pluggy==1.5.0 --hash=sha256:44e1ad92c8ca002de6377e165f3e0f1be63266ab4d554740532335b9d75ea669
iniconfig==2.0.0 --hash=sha256:b6a85871a79d2e3b22d2d1b94ac2824226a63c6b741c88f7ae975f18b6778374
packaging==24.2 --hash=sha256:09abb1bccd265c01f4a3aa3f7a7db064b36514d2cba19a2f694fe6150451a759
exceptiongroup==1.2.2; python_version < \"3.11\" --hash=sha256:3111b9d131c238bec2f8f516e123e14ba243563fb135d3fe885990585aa7795b
tomli==2.0.1; python_version < \"3.11\" --hash=sha256:939de3e7a6161af0c887ef91b7d41a53e7c5a1ca976325f429cb46ea9bc30ecc
";

const MARKER: &str = "pdl-env.json";
const LAYOUT_VERSION: &str = "pdl-swe-env-1";

/// A Python interpreter found on the machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonInterpreter {
    /// Resolved path of the executable.
    pub executable: PathBuf,
    /// `major.minor.micro`.
    pub version: String,
    /// `sys.base_prefix`: the installation the interpreter runs from.
    pub base_prefix: PathBuf,
}

/// A ready virtual environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonEnv {
    /// The environment's folder.
    pub root: PathBuf,
    /// Its interpreter (`<root>/bin/python`).
    pub python: PathBuf,
    /// Version, packages, digest.
    pub info: EnvironmentInfo,
    /// Host paths a sandboxed run needs to read to use this environment.
    pub readable_paths: Vec<PathBuf>,
}

/// Why an environment is not available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// No usable Python 3 interpreter.
    #[error(
        "no Python 3.8+ interpreter found (tried {tried}); install Python 3 or pass --python PATH"
    )]
    NoInterpreter {
        /// What was tried.
        tried: String,
    },
    /// Building the environment failed.
    #[error("cannot build the Python environment for requirements `{requirements}`: {step} failed:\n{output}\nhint: {hint}")]
    Build {
        /// The normalized requirement lines.
        requirements: String,
        /// The step that failed.
        step: String,
        /// The tail of its output.
        output: String,
        /// What to do about it.
        hint: String,
    },
    /// The dataset's `requirements.lock` asks for more than pinned packages.
    #[error("task defect: requirements.lock line {line} is not a pinned `name==version` requirement (optionally with --hash): `{text}`")]
    Requirements {
        /// One-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// The cache folder is not usable.
    #[error("environment cache {path}: {message}")]
    Cache {
        /// The folder.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

fn probe(candidate: &Path) -> Option<PythonInterpreter> {
    let script = "import json, os, sys; print(json.dumps([os.path.realpath(sys.executable), '%d.%d.%d' % sys.version_info[:3], sys.base_prefix, sys.version_info >= (3, 8)]))";
    let output = Command::new(candidate)
        .args(["-I", "-c", script])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let (exe, version, prefix, ok): (String, String, String, bool) =
        serde_json::from_slice(&output.stdout).ok()?;
    ok.then(|| PythonInterpreter {
        executable: PathBuf::from(exe),
        version,
        base_prefix: PathBuf::from(prefix),
    })
}

/// Finds a Python 3.8+ interpreter: `explicit`, then `$PDL_SWE_PYTHON`, then
/// `python3` and `python` on `PATH`.
pub fn find_interpreter(explicit: Option<&Path>) -> Result<PythonInterpreter, EnvError> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = explicit {
        candidates.push(p.to_path_buf());
    } else {
        if let Some(p) = std::env::var_os("PDL_SWE_PYTHON") {
            candidates.push(PathBuf::from(p));
        }
        candidates.push("python3".into());
        candidates.push("python".into());
    }
    for c in &candidates {
        if let Some(found) = probe(c) {
            return Ok(found);
        }
    }
    Err(EnvError::NoInterpreter {
        tried: candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// A lock file's requirement lines without comments or blanks, sorted. Only
/// pinned `name==version` lines (with optional `--hash=algorithm:digest`
/// options, continued over `\`-ended lines or not) are accepted: no index URL,
/// no path, no VCS reference, no option of any other kind, so that a dataset
/// says only which published wheels to install.
pub fn normalize_requirements(lock: &str) -> Result<Vec<String>, EnvError> {
    let mut joined: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in lock.lines().enumerate() {
        let text = raw.split(" #").next().unwrap_or("");
        let text = if text.trim_start().starts_with('#') {
            ""
        } else {
            text
        };
        let (line, continued) = match text.trim_end().strip_suffix('\\') {
            Some(head) => (head.trim().to_string(), true),
            None => (text.trim().to_string(), false),
        };
        let entry = match pending.take() {
            Some((n, mut acc)) => {
                acc.push(' ');
                acc.push_str(&line);
                (n, acc)
            }
            None => (i + 1, line),
        };
        if continued {
            pending = Some(entry);
        } else if !entry.1.trim().is_empty() {
            joined.push(entry);
        }
    }
    if let Some(entry) = pending {
        joined.push(entry);
    }
    let mut lines = Vec::new();
    for (number, line) in joined {
        let mut parts = line.split_whitespace();
        let pin = parts.next().unwrap_or("");
        let ok_pin = pin.split_once("==").is_some_and(|(name, version)| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                && name
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric())
                && !version.is_empty()
                && version
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '!' | '-' | '_'))
        });
        let ok_hashes = parts.all(|p| {
            p.strip_prefix("--hash=")
                .and_then(|h| h.split_once(':'))
                .is_some_and(|(alg, digest)| {
                    matches!(alg, "sha256" | "sha384" | "sha512")
                        && !digest.is_empty()
                        && digest.chars().all(|c| c.is_ascii_hexdigit())
                })
        });
        if !ok_pin || !ok_hashes {
            return Err(EnvError::Requirements {
                line: number,
                text: line.chars().take(200).collect(),
            });
        }
        lines.push(line.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    lines.sort();
    lines.dedup();
    Ok(lines)
}

/// Variables of the harness's own environment an installer may see: how the
/// user reaches a package index (mirrors, proxies, certificates), never
/// anything a dataset chose.
const INSTALLER_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "PIP_CERT",
    "PIP_CONFIG_FILE",
    "PIP_FIND_LINKS",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_INDEX",
    "UV_NATIVE_TLS",
    "UV_CACHE_DIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

/// An installer command with a cleared environment.
fn installer(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear();
    for name in INSTALLER_ENV {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    cmd
}

/// How environments are built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installer {
    /// uv at this path.
    Uv(PathBuf),
    /// The interpreter's venv module and pip.
    Pip,
}

fn find_uv() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PDL_SWE_UV") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("uv"))
        .find(|p| p.is_file())
}

/// One environment being built or ready, shared by every grading that needs it.
type EnvSlot = Arc<Mutex<Option<Arc<PythonEnv>>>>;

/// Builds and caches environments.
pub struct EnvManager {
    cache_root: PathBuf,
    interpreter: PythonInterpreter,
    installer: Installer,
    ready: Mutex<HashMap<String, EnvSlot>>,
}

impl std::fmt::Debug for EnvManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvManager")
            .field("cache_root", &self.cache_root)
            .field("interpreter", &self.interpreter)
            .field("installer", &self.installer)
            .finish()
    }
}

fn tail(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let start = text.len().saturating_sub(max);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    text[start..].trim().to_string()
}

impl EnvManager {
    /// An environment manager caching under `cache_root/venvs`.
    pub fn new(cache_root: PathBuf, interpreter: PythonInterpreter) -> Self {
        let installer = find_uv().map_or(Installer::Pip, Installer::Uv);
        EnvManager {
            cache_root,
            interpreter,
            installer,
            ready: Mutex::new(HashMap::new()),
        }
    }

    /// Overrides the installer.
    pub fn with_installer(mut self, installer: Installer) -> Self {
        self.installer = installer;
        self
    }

    /// The interpreter environments are built from.
    pub fn interpreter(&self) -> &PythonInterpreter {
        &self.interpreter
    }

    /// The installer in use.
    pub fn installer(&self) -> &Installer {
        &self.installer
    }

    fn key(&self, requirements: &[String]) -> String {
        let mut h = Sha256::new();
        h.update(LAYOUT_VERSION.as_bytes());
        h.update(self.interpreter.executable.to_string_lossy().as_bytes());
        h.update(self.interpreter.version.as_bytes());
        h.update(HARNESS_REQUIREMENTS.as_bytes());
        for r in requirements {
            h.update(r.as_bytes());
            h.update(b"\n");
        }
        hex::encode(h.finalize())[..16].to_string()
    }

    /// The environment for a task's `requirements.lock` content, built on first
    /// use. Safe to call from many threads and processes at once.
    pub fn ensure(&self, lock: &str) -> Result<Arc<PythonEnv>, EnvError> {
        let requirements = normalize_requirements(lock)?;
        let key = self.key(&requirements);
        let slot = self
            .ready
            .lock()
            .expect("env map lock")
            .entry(key.clone())
            .or_default()
            .clone();
        let mut slot = slot.lock().expect("env slot lock");
        if let Some(env) = slot.as_ref() {
            return Ok(env.clone());
        }
        let env = Arc::new(self.ensure_on_disk(&key, &requirements)?);
        *slot = Some(env.clone());
        Ok(env)
    }

    fn readable_paths(&self, root: &Path) -> Vec<PathBuf> {
        let mut paths = vec![root.to_path_buf(), self.interpreter.base_prefix.clone()];
        if let Some(dir) = self.interpreter.executable.parent() {
            if !dir.starts_with(&self.interpreter.base_prefix) {
                paths.push(dir.to_path_buf());
            }
        }
        paths
    }

    fn ensure_on_disk(&self, key: &str, requirements: &[String]) -> Result<PythonEnv, EnvError> {
        let venvs = self.cache_root.join("venvs");
        let cache_err = |message: String| EnvError::Cache {
            path: venvs.clone(),
            message,
        };
        std::fs::create_dir_all(&venvs).map_err(|e| cache_err(e.to_string()))?;
        let root = venvs.join(key);
        let lock_path = venvs.join(format!("{key}.lock"));
        let lock_file = File::create(&lock_path).map_err(|e| cache_err(e.to_string()))?;
        lock_file
            .lock()
            .map_err(|e| cache_err(format!("cannot lock {}: {e}", lock_path.display())))?;
        let marker = root.join(MARKER);
        if let Ok(text) = std::fs::read_to_string(&marker) {
            if let Ok(info) = serde_json::from_str::<EnvironmentInfo>(&text) {
                if root.join("bin/python").exists() {
                    return Ok(PythonEnv {
                        python: root.join("bin/python"),
                        info,
                        readable_paths: self.readable_paths(&root),
                        root,
                    });
                }
            }
        }
        if root.exists() {
            std::fs::remove_dir_all(&root)
                .map_err(|e| cache_err(format!("cannot clear a half-built environment: {e}")))?;
        }
        let info = self.build(&root, requirements)?;
        std::fs::write(
            &marker,
            serde_json::to_vec_pretty(&info).expect("info serializes"),
        )
        .map_err(|e| cache_err(e.to_string()))?;
        Ok(PythonEnv {
            python: root.join("bin/python"),
            info,
            readable_paths: self.readable_paths(&root),
            root,
        })
    }

    fn run_step(
        &self,
        step: &str,
        cmd: &mut Command,
        requirements: &[String],
    ) -> Result<(), EnvError> {
        let shown = requirements.join(" ");
        let output = cmd.output().map_err(|e| EnvError::Build {
            requirements: shown.clone(),
            step: step.to_string(),
            output: e.to_string(),
            hint: "is the tool installed and on PATH?".into(),
        })?;
        if output.status.success() {
            return Ok(());
        }
        let mut combined = output.stdout.clone();
        combined.extend_from_slice(&output.stderr);
        let text = tail(&combined, 3000);
        let lowered = text.to_lowercase();
        let hint = if lowered.contains("no matching distribution")
            || lowered.contains("could not find a version")
            || lowered.contains("no solution found")
            || lowered.contains("not found in the package registry")
        {
            "a pinned package or version does not exist on the package index; check requirements.lock"
        } else if lowered.contains("network")
            || lowered.contains("connection")
            || lowered.contains("resolve")
            || lowered.contains("offline")
        {
            "the package index could not be reached; environments need the network once, then work offline from the cache"
        } else {
            "see the installer output above"
        };
        Err(EnvError::Build {
            requirements: shown,
            step: step.to_string(),
            output: text,
            hint: hint.to_string(),
        })
    }

    fn build(&self, root: &Path, requirements: &[String]) -> Result<EnvironmentInfo, EnvError> {
        let harness = if requirements.iter().any(|r| r.contains("--hash=")) {
            HARNESS_REQUIREMENTS_HASHED
        } else {
            HARNESS_REQUIREMENTS
        };
        let reqs_text = format!("{harness}{}\n", requirements.join("\n"));
        let python = root.join("bin/python");
        match &self.installer {
            Installer::Uv(uv) => {
                self.run_step(
                    "uv venv",
                    installer(uv)
                        .args(["venv", "--quiet", "--python"])
                        .arg(&self.interpreter.executable)
                        .arg(root),
                    requirements,
                )?;
                let reqs = root.join("pdl-requirements.txt");
                std::fs::write(&reqs, &reqs_text).map_err(|e| EnvError::Cache {
                    path: reqs.clone(),
                    message: e.to_string(),
                })?;
                self.run_step(
                    "uv pip install",
                    installer(uv)
                        .args([
                            "pip",
                            "install",
                            "--quiet",
                            "--compile-bytecode",
                            "--only-binary",
                            ":all:",
                            "--python",
                        ])
                        .arg(&python)
                        .arg("-r")
                        .arg(&reqs),
                    requirements,
                )?;
            }
            Installer::Pip => {
                self.run_step(
                    "python -m venv",
                    installer(&self.interpreter.executable)
                        .args(["-m", "venv"])
                        .arg(root),
                    requirements,
                )?;
                let reqs = root.join("pdl-requirements.txt");
                std::fs::write(&reqs, &reqs_text).map_err(|e| EnvError::Cache {
                    path: reqs.clone(),
                    message: e.to_string(),
                })?;
                self.run_step(
                    "pip install",
                    installer(&python)
                        .args([
                            "-m",
                            "pip",
                            "install",
                            "--quiet",
                            "--no-input",
                            "--disable-pip-version-check",
                            "--no-warn-script-location",
                            "--only-binary",
                            ":all:",
                            "-r",
                        ])
                        .arg(&reqs),
                    requirements,
                )?;
            }
        }
        self.describe(&python, requirements)
    }

    fn describe(
        &self,
        python: &Path,
        requirements: &[String],
    ) -> Result<EnvironmentInfo, EnvError> {
        // The base interpreter, with no site processing, reads the new
        // environment's metadata: nothing installed there (a `.pth` file
        // included) runs on the host.
        let _ = python;
        let root = python
            .parent()
            .and_then(Path::parent)
            .unwrap_or(Path::new("."));
        let minor: String = self
            .interpreter
            .version
            .split('.')
            .take(2)
            .collect::<Vec<_>>()
            .join(".");
        let site = root.join(format!("lib/python{minor}/site-packages"));
        let script = "import importlib.metadata as m, json, sys; print(json.dumps(['%d.%d.%d' % sys.version_info[:3], sorted('%s==%s' % (d.metadata['Name'], d.version) for d in m.distributions(path=[sys.argv[1]]))]))";
        let output = installer(&self.interpreter.executable)
            .args(["-I", "-S", "-c", script])
            .arg(&site)
            .output()
            .map_err(|e| EnvError::Build {
                requirements: requirements.join(" "),
                step: "describe environment".into(),
                output: e.to_string(),
                hint: "the new environment's interpreter does not start".into(),
            })?;
        let (python_version, packages): (String, Vec<String>) =
            serde_json::from_slice(&output.stdout).map_err(|e| EnvError::Build {
                requirements: requirements.join(" "),
                step: "describe environment".into(),
                output: format!("{e}: {}", tail(&output.stderr, 2000)),
                hint: "the new environment's interpreter does not start".into(),
            })?;
        let mut h = Sha256::new();
        h.update(python_version.as_bytes());
        for p in &packages {
            h.update(b"\n");
            h.update(p.to_lowercase().as_bytes());
        }
        Ok(EnvironmentInfo {
            digest: format!("sha256:{}", hex::encode(h.finalize())),
            python_version,
            packages,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_are_normalized() {
        let lock = "# Standard library only.\n\n";
        assert!(normalize_requirements(lock).unwrap().is_empty());
        let lock = "six==1.17.0  # needed by dateutil\npython-dateutil==2.9.0.post0\n";
        assert_eq!(
            normalize_requirements(lock).unwrap(),
            vec!["python-dateutil==2.9.0.post0", "six==1.17.0"]
        );
        let hashed = "six==1.17.0 \\\n    --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274\n";
        assert_eq!(normalize_requirements(hashed).unwrap().len(), 1);
    }

    #[test]
    fn anything_but_pinned_packages_is_refused_with_its_line() {
        for bad in [
            "--index-url https://evil.example/simple",
            "-e git+https://example.com/x.git#egg=x",
            "https://example.com/x.whl",
            "./local/path",
            "six>=1.0",
            "six==1.17.0 --install-option=--prefix=/",
            "six==1.17.0; python_version<'3.11'",
            "-r other.txt",
        ] {
            let lock = format!("six==1.17.0\n{bad}\n");
            match normalize_requirements(&lock) {
                Err(EnvError::Requirements { line, .. }) => assert_eq!(line, 2, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_missing_interpreter_is_named() {
        let err = find_interpreter(Some(Path::new("/nonexistent/python9"))).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/python9"), "{err}");
    }
}
