//! The built-in agent's tools ([`Toolbox`]): run a shell command in the sandbox,
//! view a file with line numbers, replace a unique string in a file, finish.
//!
//! File tools act on the host side but only inside the workspace: every path is
//! opened beneath the workspace without following any symbolic link
//! ([`pdl_fs::Dir`]: `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, or one
//! component at a time with `O_NOFOLLOW`), so a link the agent planted with
//! `run_shell` — dangling or not, to a file or to a folder — can never make a
//! tool read or write outside the workspace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pdl_sandbox::{ProcessRunner, RunStatus, SandboxCommand};
use serde_json::{json, Value};

use crate::agent::chat::ToolSpec;

/// Longest tool output shown to the model, in bytes (head and tail are kept).
pub const MAX_TOOL_OUTPUT: usize = 16 * 1024;
/// Largest file the file tools read.
pub const MAX_FILE_BYTES: u64 = 8 << 20;
/// Longest shell command bound the model may ask for.
pub const MAX_SHELL_TIMEOUT: Duration = Duration::from_secs(600);

/// The tools, described for the model. Part of the prompt version.
pub fn tool_specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "run_shell",
            description: "Run a shell command (sh -c) in the repository root, inside the sandbox: no network. Returns the exit code and the combined output (long output is cut in the middle). Use it to explore, run tests (python -m pytest) and edit files.",
            parameters: json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The command line."},
                "timeout_s": {"type": "integer", "description": "Time bound in seconds (default 120, at most 600)."}
            }, "required": ["command"]}),
        },
        ToolSpec {
            name: "view_file",
            description: "Show a file of the repository with line numbers, optionally only lines start_line..end_line (1-based, inclusive).",
            parameters: json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Path relative to the repository root."},
                "start_line": {"type": "integer"},
                "end_line": {"type": "integer"}
            }, "required": ["path"]}),
        },
        ToolSpec {
            name: "replace_in_file",
            description: "Replace the one occurrence of old_text in a file with new_text. old_text must occur exactly once (include enough context). An empty old_text with a missing file creates the file.",
            parameters: json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "old_text": {"type": "string"},
                "new_text": {"type": "string"}
            }, "required": ["path", "old_text", "new_text"]}),
        },
        ToolSpec {
            name: "finish",
            description: "Stop: the fix is complete. The repository as it stands is graded.",
            parameters: json!({"type": "object", "properties": {
                "summary": {"type": "string", "description": "What you changed and why."}
            }}),
        },
    ]
}

/// Cuts long text in the middle, keeping its head and tail.
pub fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let half = max / 2;
    let mut head_end = half;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - half;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    format!(
        "{}\n[... {} bytes cut ...]\n{}",
        &text[..head_end],
        tail_start - head_end,
        &text[tail_start..]
    )
}

/// What running a tool did.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// Text for the model.
    Output(String),
    /// The agent asked to finish.
    Finish(String),
}

/// Runs the built-in tools for one episode.
pub struct Toolbox {
    runner: Arc<dyn ProcessRunner>,
    workspace: PathBuf,
    scratch: PathBuf,
    env: BTreeMap<String, String>,
    readable: Vec<PathBuf>,
    default_timeout: Duration,
    counter: AtomicU64,
}

impl Toolbox {
    /// Tools over `workspace`; shell commands run through `runner` with `env`
    /// and may read `readable` (the task's Python environment).
    pub fn new(
        runner: Arc<dyn ProcessRunner>,
        workspace: PathBuf,
        scratch: PathBuf,
        env: BTreeMap<String, String>,
        readable: Vec<PathBuf>,
        default_timeout: Duration,
    ) -> Self {
        Toolbox {
            runner,
            workspace,
            scratch,
            env,
            readable,
            default_timeout,
            counter: AtomicU64::new(0),
        }
    }

    /// Runs one tool call. Bad arguments are reported to the model, not raised.
    pub fn run(&self, name: &str, arguments: &Result<Value, String>) -> ToolOutcome {
        let args = match arguments {
            Ok(v) => v,
            Err(raw) => {
                return ToolOutcome::Output(format!(
                    "error: the arguments are not a JSON object: {}",
                    clip(raw, 500)
                ))
            }
        };
        let text = |key: &str| args.get(key).and_then(Value::as_str);
        match name {
            "run_shell" => match text("command") {
                Some(cmd) => {
                    let timeout = args
                        .get("timeout_s")
                        .and_then(Value::as_u64)
                        .map(Duration::from_secs)
                        .unwrap_or(self.default_timeout)
                        .min(MAX_SHELL_TIMEOUT);
                    ToolOutcome::Output(self.shell(cmd, timeout))
                }
                None => ToolOutcome::Output("error: run_shell needs `command`".into()),
            },
            "view_file" => match text("path") {
                Some(p) => ToolOutcome::Output(self.view(
                    p,
                    args.get("start_line").and_then(Value::as_u64),
                    args.get("end_line").and_then(Value::as_u64),
                )),
                None => ToolOutcome::Output("error: view_file needs `path`".into()),
            },
            "replace_in_file" => match (text("path"), text("old_text"), text("new_text")) {
                (Some(p), Some(old), Some(new)) => ToolOutcome::Output(self.replace(p, old, new)),
                _ => ToolOutcome::Output(
                    "error: replace_in_file needs `path`, `old_text` and `new_text`".into(),
                ),
            },
            "finish" => ToolOutcome::Finish(text("summary").unwrap_or("").to_string()),
            other => ToolOutcome::Output(format!(
                "error: no tool called `{other}` (use run_shell, view_file, replace_in_file, finish)"
            )),
        }
    }

    fn shell(&self, command: &str, timeout: Duration) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut cmd = SandboxCommand::new("/bin/sh", &self.workspace, &self.scratch)
            .args(["-c", command])
            .writable(self.workspace.clone())
            .wall_time(timeout);
        cmd.env = self.env.clone();
        cmd.readable = self.readable.clone();
        cmd.output = self.scratch.join(format!("shell-{n}.log"));
        cmd.limits.max_output_bytes = 1 << 20;
        let report = self.runner.run(&cmd);
        let output = std::fs::read_to_string(&report.output_path).unwrap_or_else(|_| {
            String::from_utf8_lossy(&std::fs::read(&report.output_path).unwrap_or_default())
                .into_owned()
        });
        let _ = std::fs::remove_file(&report.output_path);
        let status = match &report.status {
            RunStatus::Exited { code } => format!("exit code {code}"),
            RunStatus::TimedOut => format!(
                "timed out after {} s (the command was killed)",
                timeout.as_secs()
            ),
            RunStatus::Signaled { signal } => format!("killed by signal {signal}"),
            RunStatus::OutOfMemory => "out of memory".into(),
            RunStatus::SpawnFailed { reason } | RunStatus::SandboxFailed { reason } => {
                format!("could not run: {reason}")
            }
        };
        format!("[{status}]\n{}", clip(&output, MAX_TOOL_OUTPUT))
    }

    /// The workspace and a repository-relative path in it: plain components
    /// only, nothing under `.git`.
    fn locate(&self, path: &str) -> Result<(pdl_fs::Dir, PathBuf), String> {
        let trimmed = path.trim().trim_start_matches("./");
        let rel = PathBuf::from(trimmed);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(format!("error: {path} is outside the repository"));
        }
        if rel.components().any(|c| c.as_os_str() == ".git") {
            return Err(format!("error: {path} is inside .git"));
        }
        let dir = pdl_fs::Dir::open(&self.workspace).map_err(|e| format!("error: {e}"))?;
        Ok((dir, rel))
    }

    fn fs_error(path: &str, e: &pdl_fs::FsError) -> String {
        match &e.kind {
            pdl_fs::FsErrorKind::Symlink => format!(
                "error: {path} is a symbolic link or passes through one; the file tools do not follow links (use run_shell to inspect it)"
            ),
            pdl_fs::FsErrorKind::NotBeneath => format!("error: {path} is outside the repository"),
            kind => format!("error: {path}: {kind}"),
        }
    }

    fn view(&self, path: &str, start: Option<u64>, end: Option<u64>) -> String {
        let (dir, rel) = match self.locate(path) {
            Ok(found) => found,
            Err(e) => return e,
        };
        let listing = |dir: &pdl_fs::Dir| match dir.list() {
            Ok(entries) => {
                let names: Vec<String> = entries
                    .into_iter()
                    .map(|(name, kind)| match kind {
                        pdl_fs::EntryKind::Dir => format!("{name}/"),
                        pdl_fs::EntryKind::Symlink => format!("{name}@"),
                        _ => name,
                    })
                    .collect();
                format!("{path} is a folder:\n{}", names.join("\n"))
            }
            Err(e) => Self::fs_error(path, &e),
        };
        if rel.as_os_str().is_empty() {
            return listing(&dir);
        }
        match dir.entry(&rel) {
            Ok(Some(pdl_fs::EntryKind::Dir)) => {
                return match dir.open_dir(&rel, false) {
                    Ok(sub) => listing(&sub),
                    Err(e) => Self::fs_error(path, &e),
                }
            }
            Ok(None) => return format!("error: {path} does not exist"),
            Ok(Some(_)) => {}
            Err(e) => return Self::fs_error(path, &e),
        }
        let bytes = match dir.read(&rel, MAX_FILE_BYTES) {
            Ok(Some(b)) => b,
            Ok(None) => return format!("error: {path} does not exist"),
            Err(e) => return Self::fs_error(path, &e),
        };
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        let first = start.unwrap_or(1).max(1) as usize;
        let last = end.map_or(lines.len(), |e| (e as usize).min(lines.len()));
        if lines.is_empty() {
            return format!("{path} is empty");
        }
        if first > last {
            return format!(
                "error: {path} has {} lines; {first}..{last} is empty",
                lines.len()
            );
        }
        let body: String = lines[first - 1..last]
            .iter()
            .enumerate()
            .map(|(i, l)| format!("{:>6}\t{l}\n", first + i))
            .collect();
        clip(&body, MAX_TOOL_OUTPUT)
    }

    fn replace(&self, path: &str, old: &str, new: &str) -> String {
        let (dir, rel) = match self.locate(path) {
            Ok(found) if !found.1.as_os_str().is_empty() => found,
            Ok(_) => return format!("error: {path} is not a file"),
            Err(e) => return e,
        };
        match dir.entry(&rel) {
            Ok(None) => {
                if !old.is_empty() {
                    return format!("error: {path} does not exist");
                }
                return match dir.open_file(&rel, pdl_fs::OpenMode::CreateNew) {
                    Ok(mut file) => match std::io::Write::write_all(&mut file, new.as_bytes()) {
                        Ok(()) => format!("created {path}"),
                        Err(e) => format!("error: {path}: {e}"),
                    },
                    Err(e) => Self::fs_error(path, &e),
                };
            }
            Ok(Some(pdl_fs::EntryKind::Symlink)) => {
                return Self::fs_error(
                    path,
                    &pdl_fs::FsError {
                        path: rel.clone(),
                        kind: pdl_fs::FsErrorKind::Symlink,
                    },
                )
            }
            Ok(Some(_)) => {}
            Err(e) => return Self::fs_error(path, &e),
        }
        let content = match dir.read(&rel, MAX_FILE_BYTES) {
            Ok(Some(bytes)) => match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) => return format!("error: {path} is not UTF-8 text"),
            },
            Ok(None) => return format!("error: {path} does not exist"),
            Err(e) => return Self::fs_error(path, &e),
        };
        if old.is_empty() {
            return format!("error: {path} exists; old_text must not be empty");
        }
        match content.matches(old).count() {
            0 => format!("error: old_text does not occur in {path}"),
            1 => match dir.write(&rel, content.replacen(old, new, 1).as_bytes()) {
                Ok(()) => format!("replaced 1 occurrence in {path}"),
                Err(e) => Self::fs_error(path, &e),
            },
            n => format!(
                "error: old_text occurs {n} times in {path}; include more context so it is unique"
            ),
        }
    }
}

/// True when `path` is a host file a tool may read (for tests and callers).
pub fn is_inside(root: &Path, path: &Path) -> bool {
    match (root.canonicalize(), path.canonicalize()) {
        (Ok(r), Ok(p)) => p.starts_with(r),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdl_sandbox::PlainRunner;

    fn toolbox() -> (tempfile::TempDir, Toolbox) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/a.py"), "x = 1\ny = 2\nx = 1\n").unwrap();
        let env = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
        let tb = Toolbox::new(
            Arc::new(PlainRunner),
            ws,
            dir.path().join("scratch"),
            env,
            vec![],
            Duration::from_secs(10),
        );
        (dir, tb)
    }

    #[test]
    fn view_numbers_lines_and_ranges() {
        let (_d, tb) = toolbox();
        let out = tb.view("src/a.py", Some(2), Some(3));
        assert_eq!(out, "     2\ty = 2\n     3\tx = 1\n");
        assert!(tb.view("src", None, None).contains("a.py"));
    }

    #[test]
    fn replace_needs_a_unique_match() {
        let (_d, tb) = toolbox();
        assert!(tb
            .replace("src/a.py", "x = 1", "x = 3")
            .contains("occurs 2 times"));
        assert!(tb
            .replace("src/a.py", "y = 2", "y = 5")
            .contains("replaced 1"));
        assert!(tb.replace("src/new.py", "", "z = 0\n").contains("created"));
        assert!(tb
            .replace("src/a.py", "nope", "z")
            .contains("does not occur"));
    }

    #[test]
    fn paths_cannot_leave_the_workspace() {
        let (dir, tb) = toolbox();
        std::fs::write(dir.path().join("secret.txt"), "s3cr3t").unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("secret.txt"),
            dir.path().join("ws/src/link"),
        )
        .unwrap();
        assert!(tb.view("../secret.txt", None, None).contains("outside"));
        assert!(tb.view("src/link", None, None).contains("symbolic link"));
        assert!(tb
            .replace("src/link", "s3cr3t", "x")
            .contains("symbolic link"));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("secret.txt")).unwrap(),
            "s3cr3t"
        );
        assert!(tb.view(".git/config", None, None).contains(".git"));
        assert!(
            tb.view("/etc/passwd", None, None).contains("outside")
                || tb.view("/etc/passwd", None, None).contains("error")
        );
    }

    #[test]
    fn a_dangling_link_or_a_linked_folder_never_leads_a_write_outside() {
        let (dir, tb) = toolbox();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        // What an agent can plant with run_shell: a dangling link to a host
        // path, and a link to a folder outside.
        std::os::unix::fs::symlink(
            outside.join("planted.txt"),
            dir.path().join("ws/src/dangling"),
        )
        .unwrap();
        std::os::unix::fs::symlink(&outside, dir.path().join("ws/src/out")).unwrap();
        let created = tb.replace("src/dangling", "", "pwned\n");
        assert!(created.contains("symbolic link"), "{created}");
        let through = tb.replace("src/out/new.txt", "", "pwned\n");
        assert!(through.contains("symbolic link"), "{through}");
        assert!(tb.view("src/out", None, None).contains("symbolic link"));
        assert!(!outside.join("planted.txt").exists());
        assert!(!outside.join("new.txt").exists());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // The listing shows links for what they are.
        assert!(tb.view("src", None, None).contains("dangling@"));
        // Ordinary files still work, new folders included.
        assert!(tb
            .replace("src/pkg/mod.py", "", "x = 1\n")
            .contains("created"));
        assert!(tb.view("src/pkg/mod.py", None, None).contains("x = 1"));
    }

    #[test]
    fn shell_reports_exit_codes_and_clips_output() {
        let (_d, tb) = toolbox();
        let out = tb.shell("echo hi; exit 3", Duration::from_secs(5));
        assert!(
            out.starts_with("[exit code 3]") && out.contains("hi"),
            "{out}"
        );
        let long = tb.shell(
            "head -c 100000 /dev/zero | tr '\\0' 'y'",
            Duration::from_secs(5),
        );
        assert!(long.contains("bytes cut"), "{}", long.len());
        let slow = tb.shell("sleep 5", Duration::from_secs(1));
        assert!(slow.contains("timed out"), "{slow}");
    }

    #[test]
    fn clip_keeps_head_and_tail() {
        let s = "a".repeat(50) + &"b".repeat(50);
        let c = clip(&s, 20);
        assert!(c.starts_with("aaaaaaaaaa") && c.ends_with("bbbbbbbbbb"));
    }
}
