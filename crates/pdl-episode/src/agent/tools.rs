//! The built-in agent's tools ([`Toolbox`]): run a shell command in the sandbox,
//! view a file with line numbers, replace a unique string in a file, finish.
//!
//! File tools act on the host side but only inside the workspace: a path is
//! resolved with every symbolic link followed and refused unless it stays in the
//! workspace, so a link the agent planted cannot reach host files.

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

    /// Resolves a repository-relative path, refusing anything that leaves the
    /// workspace (through `..`, an absolute path or a symbolic link).
    fn resolve(&self, path: &str, must_exist: bool) -> Result<PathBuf, String> {
        let root = self
            .workspace
            .canonicalize()
            .map_err(|e| format!("error: {e}"))?;
        let candidate = root.join(path.trim_start_matches("./"));
        let resolved = if must_exist || candidate.exists() {
            candidate
                .canonicalize()
                .map_err(|e| format!("error: {path}: {e}"))?
        } else {
            let parent = candidate
                .parent()
                .ok_or_else(|| format!("error: {path}: no parent folder"))?;
            let parent = parent
                .canonicalize()
                .map_err(|e| format!("error: {path}: {e}"))?;
            parent.join(
                candidate
                    .file_name()
                    .ok_or_else(|| format!("error: {path}: not a file name"))?,
            )
        };
        if !resolved.starts_with(&root) {
            return Err(format!("error: {path} is outside the repository"));
        }
        if resolved.components().any(|c| c.as_os_str() == ".git") {
            return Err(format!("error: {path} is inside .git"));
        }
        Ok(resolved)
    }

    fn view(&self, path: &str, start: Option<u64>, end: Option<u64>) -> String {
        let resolved = match self.resolve(path, true) {
            Ok(p) => p,
            Err(e) => return e,
        };
        if resolved.is_dir() {
            let mut names: Vec<String> = std::fs::read_dir(&resolved)
                .map(|it| {
                    it.filter_map(Result::ok)
                        .map(|e| {
                            let n = e.file_name().to_string_lossy().into_owned();
                            if e.path().is_dir() {
                                format!("{n}/")
                            } else {
                                n
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            return format!("{path} is a folder:\n{}", names.join("\n"));
        }
        let bytes = match std::fs::read(&resolved) {
            Ok(b) => b,
            Err(e) => return format!("error: {path}: {e}"),
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
        let resolved = match self.resolve(path, false) {
            Ok(p) => p,
            Err(e) => return e,
        };
        if !resolved.exists() {
            if old.is_empty() {
                if let Some(parent) = resolved.parent() {
                    if let Err(e) = std::fs::create_dir_all(parent) {
                        return format!("error: {path}: {e}");
                    }
                }
                return match std::fs::write(&resolved, new) {
                    Ok(()) => format!("created {path}"),
                    Err(e) => format!("error: {path}: {e}"),
                };
            }
            return format!("error: {path} does not exist");
        }
        let content = match std::fs::read_to_string(&resolved) {
            Ok(c) => c,
            Err(e) => return format!("error: {path}: {e}"),
        };
        if old.is_empty() {
            return format!("error: {path} exists; old_text must not be empty");
        }
        match content.matches(old).count() {
            0 => format!("error: old_text does not occur in {path}"),
            1 => match std::fs::write(&resolved, content.replacen(old, new, 1)) {
                Ok(()) => format!("replaced 1 occurrence in {path}"),
                Err(e) => format!("error: {path}: {e}"),
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
        assert!(tb.view("src/link", None, None).contains("outside"));
        assert!(tb.replace("src/link", "s3cr3t", "x").contains("outside"));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("secret.txt")).unwrap(),
            "s3cr3t"
        );
        assert!(
            tb.view("/etc/passwd", None, None).contains("outside")
                || tb.view("/etc/passwd", None, None).contains("error")
        );
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
