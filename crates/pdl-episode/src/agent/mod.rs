//! Agents and the pieces of one episode: the workspace an agent gets
//! ([`prepare_workspace`]), the built-in agent ([`builtin`]), external command
//! agents ([`run_external`]), how an episode ends ([`EndReason`]) and the final
//! patch ([`final_patch`]).

pub mod builtin;
pub mod chat;
pub mod tools;
pub mod view;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pdl_sandbox::{NetworkPolicy, ProcessRunner, RunStatus, SandboxCommand};
use pdl_task::RepoFile;
use serde::{Deserialize, Serialize};

/// Why an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The agent said it was done (or its command exited 0).
    Finished,
    /// The token budget was spent.
    BudgetExhausted,
    /// The step limit was reached.
    StepLimit,
    /// The wall-clock limit was reached.
    TimeLimit,
    /// The agent failed (an error from the model API, a non-zero exit).
    AgentError,
}

impl EndReason {
    /// The name used in records.
    pub fn name(self) -> &'static str {
        match self {
            EndReason::Finished => "finished",
            EndReason::BudgetExhausted => "budget_exhausted",
            EndReason::StepLimit => "step_limit",
            EndReason::TimeLimit => "time_limit",
            EndReason::AgentError => "agent_error",
        }
    }
}

/// Bounds on one episode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeLimits {
    /// Model calls (built-in agent) before the episode ends.
    pub max_steps: usize,
    /// Wall-clock bound of the whole episode.
    pub wall_time: Duration,
    /// Default bound of one shell command of the built-in agent.
    pub shell_timeout: Duration,
}

impl Default for EpisodeLimits {
    fn default() -> Self {
        EpisodeLimits {
            max_steps: 100,
            wall_time: Duration::from_secs(3600),
            shell_timeout: Duration::from_secs(120),
        }
    }
}

/// What an agent is told about its task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskBrief {
    /// The issue.
    pub problem_statement: String,
    /// Globs the agent may modify.
    pub allowed: Vec<String>,
    /// Globs it must not modify.
    pub forbidden: Vec<String>,
    /// Its token budget.
    pub token_budget: u64,
}

/// How an agent's run went.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRun {
    /// Why it ended.
    pub end_reason: EndReason,
    /// Model calls made.
    pub steps: usize,
    /// What went wrong, for `agent_error`.
    pub error: Option<String>,
    /// The agent's own summary, when it gave one.
    pub summary: Option<String>,
    /// Wall time of the agent, in seconds.
    pub wall_s: f64,
}

/// A sanitized git command (see `pdl_grader::apply::git_command`) with a fixed
/// identity and date, so base commits are reproducible.
fn git(dir: &Path) -> Command {
    let mut cmd = pdl_grader::apply::git_command(dir);
    cmd.env("GIT_AUTHOR_NAME", "pdl-swe")
        .env("GIT_AUTHOR_EMAIL", "pdl-swe@localhost")
        .env("GIT_COMMITTER_NAME", "pdl-swe")
        .env("GIT_COMMITTER_EMAIL", "pdl-swe@localhost")
        .env("GIT_AUTHOR_DATE", "2000-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2000-01-01T00:00:00Z");
    cmd
}

fn run_git(cmd: &mut Command, what: &str) -> std::io::Result<Vec<u8>> {
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "git {what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// Writes the task's files into `dir` and makes it a git repository with one base
/// commit, so `git diff` works for the agent.
///
/// This git runs on the host, so nothing of the dataset may configure it: the
/// loader refuses any `files` path with a `.git` component, the files are
/// written beneath `dir` without following a link, and the workspace must
/// hold no `.git` before `git init` makes a fresh one (with no templates). Git
/// then reads no configuration but its own fresh repository's and the
/// harness's `-c` overrides (no system or global file, no attributes file, no
/// hooks, no fsmonitor, no ceiling-crossing discovery). A `.gitattributes` in
/// the files can still name a filter, diff or merge driver, but a driver runs
/// only when configuration defines it, and none does.
pub fn prepare_workspace(files: &[RepoFile], dir: &Path) -> std::io::Result<()> {
    pdl_grader::workspace::materialize(files, dir)?;
    let root = pdl_fs::Dir::open(dir)?;
    if root.entry(Path::new(".git"))?.is_some() {
        return Err(std::io::Error::other(format!(
            "{}: the workspace already holds a `.git`; its repository is made fresh by the harness",
            dir.join(".git").display()
        )));
    }
    run_git(
        git(dir).args(["init", "-q", "--template=", "-b", "main"]),
        "init",
    )?;
    run_git(workspace_git(dir).args(["add", "-A", "-f"]), "add")?;
    run_git(
        workspace_git(dir).args(["commit", "-q", "--no-verify", "-m", "base"]),
        "commit",
    )?;
    Ok(())
}

/// [`git`] pinned to the workspace's own fresh repository (never one found by
/// discovery), with every driver and hook switched off that configuration
/// could turn on.
fn workspace_git(dir: &Path) -> Command {
    let mut cmd = git(dir);
    cmd.env("GIT_DIR", dir.join(".git"))
        .env("GIT_WORK_TREE", dir)
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.attributesFile=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.untrackedCache=false",
            "-c",
            "commit.gpgSign=false",
            "-c",
            "submodule.recurse=false",
        ]);
    cmd
}

/// The agent's graded changes as a unified diff against the pristine files:
/// the workspace is read without following anything and within `limits`, and
/// only the changes the task's policy lets through are in the diff (dropped
/// files are listed in the record, never copied). The diff is made by git on two
/// trees the harness writes itself, never inside the agent's repository (whose
/// configuration the agent controls).
pub fn final_patch(
    files: &[RepoFile],
    policy: &pdl_grader::PatchPolicy,
    workspace: &Path,
    scratch: &Path,
    limits: &pdl_grader::changes::TreeLimits,
) -> std::io::Result<String> {
    use pdl_grader::changes::{build_graded_tree, police_tree, TreeOrigin};
    let policed = police_tree(
        workspace,
        TreeOrigin::Workspace,
        files,
        policy,
        &[],
        &[],
        limits,
    )
    .map_err(std::io::Error::other)?;
    let root = scratch.join("final-patch");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root)?;
    pdl_grader::workspace::materialize(files, &root.join("a"))?;
    build_graded_tree(&root.join("b"), files, &policed.graded, &[])?;
    let out = git(&root)
        .args([
            "diff",
            "--no-index",
            "--binary",
            "--no-prefix",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "a",
            "b",
        ])
        .output()?;
    let _ = std::fs::remove_dir_all(&root);
    // `git diff --no-index` exits 1 when the trees differ.
    match out.status.code() {
        Some(0) | Some(1) => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        _ => Err(std::io::Error::other(format!(
            "git diff: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
}

/// The environment every agent process gets (before agent-specific variables).
pub fn base_environment(python_bin: Option<&Path>) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let path = match python_bin {
        Some(bin) => format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
        None => "/usr/local/bin:/usr/bin:/bin".to_string(),
    };
    env.insert("PATH".into(), path);
    env.insert("LANG".into(), "C.UTF-8".into());
    env.insert("LC_ALL".into(), "C.UTF-8".into());
    env.insert("TERM".into(), "dumb".into());
    env.insert("PYTHONDONTWRITEBYTECODE".into(), "1".into());
    env.insert("USER".into(), "agent".into());
    env
}

/// An external agent's settings.
#[derive(Debug, Clone)]
pub struct ExternalAgent {
    /// The command, run by `sh -c` in the workspace.
    pub command: String,
    /// Extra variables (`--agent-env`).
    pub env: Vec<(String, String)>,
    /// Extra host paths the agent may read (its own installation).
    pub readable: Vec<PathBuf>,
}

/// Where an external agent reaches the gateway from inside the sandbox.
#[derive(Debug, Clone)]
pub struct GatewayRoute {
    /// Port on the sandbox's loopback.
    pub port: u16,
    /// The gateway's Unix socket on the host.
    pub socket: PathBuf,
    /// The episode's token.
    pub token: String,
    /// The model name the campaign evaluates.
    pub model: String,
    /// The upstream API.
    pub api: crate::ApiKind,
}

/// Runs an external agent command in the sandbox. An infrastructure failure (the
/// sandbox could not start) is returned as `Err`.
#[allow(clippy::too_many_arguments)]
pub fn run_external(
    agent: &ExternalAgent,
    runner: &Arc<dyn ProcessRunner>,
    workspace: &Path,
    scratch: &Path,
    mut env: BTreeMap<String, String>,
    mut readable: Vec<PathBuf>,
    brief: &TaskBrief,
    route: &GatewayRoute,
    limits: &EpisodeLimits,
    budget_spent: &dyn Fn() -> bool,
    calls: &dyn Fn() -> usize,
) -> Result<AgentRun, String> {
    let started = Instant::now();
    let mut cmd = SandboxCommand::new("/bin/sh", workspace, scratch)
        .args(["-c", agent.command.as_str()])
        .writable(workspace.to_path_buf())
        .wall_time(limits.wall_time)
        .network(NetworkPolicy::Gateway {
            port: route.port,
            socket: route.socket.clone(),
        });
    cmd.output = scratch.join("agent.log");
    cmd.limits.max_output_bytes = 16 << 20;
    std::fs::create_dir_all(&cmd.home)
        .map_err(|e| format!("cannot create the agent's home: {e}"))?;
    let problem_file = cmd.home.join("problem.md");
    std::fs::write(&problem_file, &brief.problem_statement)
        .map_err(|e| format!("cannot write {}: {e}", problem_file.display()))?;
    let base = format!("http://127.0.0.1:{}", route.port);
    env.insert("OPENAI_BASE_URL".into(), format!("{base}/v1"));
    env.insert("OPENAI_API_BASE".into(), format!("{base}/v1"));
    env.insert("ANTHROPIC_BASE_URL".into(), base.clone());
    env.insert("OPENAI_API_KEY".into(), route.token.clone());
    env.insert("ANTHROPIC_API_KEY".into(), route.token.clone());
    env.insert("PDL_GATEWAY_URL".into(), base);
    env.insert("PDL_MODEL".into(), route.model.clone());
    env.insert("PDL_API".into(), route.api.name().into());
    env.insert(
        "PDL_PROBLEM_STATEMENT".into(),
        brief.problem_statement.clone(),
    );
    env.insert(
        "PDL_PROBLEM_FILE".into(),
        problem_file.display().to_string(),
    );
    env.insert("PDL_TOKEN_BUDGET".into(), brief.token_budget.to_string());
    env.insert("PDL_PATCH_POLICY_ALLOWED".into(), brief.allowed.join("\n"));
    env.insert(
        "PDL_PATCH_POLICY_FORBIDDEN".into(),
        brief.forbidden.join("\n"),
    );
    env.insert("PDL_WORKSPACE".into(), workspace.display().to_string());
    for (k, v) in &agent.env {
        env.insert(k.clone(), v.clone());
    }
    cmd.env = env;
    readable.extend(agent.readable.iter().cloned());
    cmd.readable = readable;
    let report = runner.run(&cmd);
    let wall_s = started.elapsed().as_secs_f64();
    let tail = || report.output_tail(2000);
    let (end_reason, error) = match attributed_status(&report) {
        RunStatus::SandboxFailed { reason } => return Err(format!("sandbox: {reason}")),
        _ if budget_spent() => (EndReason::BudgetExhausted, None),
        RunStatus::TimedOut => (EndReason::TimeLimit, None),
        RunStatus::Exited { code: 0 } => (EndReason::Finished, None),
        RunStatus::Exited { code } => (
            EndReason::AgentError,
            Some(format!("the agent exited with code {code}: {}", tail())),
        ),
        RunStatus::Signaled { signal } => (
            EndReason::AgentError,
            Some(format!(
                "the agent was killed by signal {signal}: {}",
                tail()
            )),
        ),
        RunStatus::OutOfMemory => (
            EndReason::AgentError,
            Some(format!(
                "the agent ran out of memory: the kernel killed {} process(es) of its run at the memory bound",
                report.oom_kills.max(1)
            )),
        ),
        RunStatus::SpawnFailed { reason } => (
            EndReason::AgentError,
            Some(format!("the agent could not start: {reason}")),
        ),
    };
    Ok(AgentRun {
        end_reason,
        steps: calls(),
        error,
        summary: None,
        wall_s,
    })
}

/// How a run ended, for blame. A sandbox helper that died of SIGKILL while
/// the run's cgroup recorded out-of-memory kills died of the run's memory:
/// pages of files in the run's tmpfs (`/tmp`, the workspace) are charged to its
/// cgroup but belong to no process, so killing the agent frees nothing and the
/// kernel may pick the helper. That is the run's own doing ([`RunStatus::OutOfMemory`]),
/// never an infrastructure failure: otherwise an agent could turn any episode it
/// judged lost into a harness error, left out of the means and run again.
fn attributed_status(report: &pdl_sandbox::RunReport) -> RunStatus {
    match &report.status {
        RunStatus::SandboxFailed { reason }
            if report.oom_kills > 0 && helper_killed_by_sigkill(reason) =>
        {
            RunStatus::OutOfMemory
        }
        status => status.clone(),
    }
}

/// True when a sandbox failure says the helper was killed by SIGKILL (the
/// runner's "the sandbox helper was killed by signal 9").
fn helper_killed_by_sigkill(reason: &str) -> bool {
    const SIGKILL: i32 = 9;
    reason.contains("helper") && reason.ends_with(&format!("killed by signal {SIGKILL}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, content: &str) -> RepoFile {
        RepoFile {
            path: path.into(),
            content: content.into(),
        }
    }

    #[test]
    fn no_dataset_configuration_reaches_the_hosts_git() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("filter-ran");
        let filter = format!(
            "[filter \"evil\"]\n\tclean = sh -c 'touch {0} && cat'\n\tsmudge = sh -c 'touch {0} && cat'\n\tprocess = sh -c 'touch {0}'\n",
            marker.display()
        );
        // A `.git` anywhere in the files is refused before git runs.
        for git_path in [".git/config", "sub/.git/config", ".GIT/info/attributes"] {
            let ws = dir
                .path()
                .join(format!("ws-{}", git_path.replace('/', "_")));
            let files = vec![file(git_path, &filter), file("src/a.py", "a = 1\n")];
            let err = prepare_workspace(&files, &ws).unwrap_err();
            assert!(err.to_string().contains("unsafe path"), "{git_path}: {err}");
            assert!(!ws.join(".git").exists() || git_path.starts_with(".GIT"));
        }
        // Attributes that name drivers find no configuration defining them,
        // even with the configuration text in a tracked file.
        let ws = dir.path().join("ws-attributes");
        let files = vec![
            file(".gitattributes", "* filter=evil diff=evil merge=evil\n"),
            file("gitconf", &filter),
            file("src/a.py", "a = 1\n"),
        ];
        prepare_workspace(&files, &ws).unwrap();
        assert!(!marker.exists(), "a dataset's filter ran on the host");
        let tracked = std::process::Command::new("git")
            .args(["ls-files"])
            .current_dir(&ws)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&tracked.stdout),
            ".gitattributes\ngitconf\nsrc/a.py\n"
        );
        // A workspace that already holds a `.git` is refused.
        let ws = dir.path().join("ws-existing");
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::write(ws.join(".git/config"), &filter).unwrap();
        let err = prepare_workspace(&[file("src/a.py", "a = 1\n")], &ws).unwrap_err();
        assert!(err.to_string().contains("holds a `.git`"), "{err}");
        assert!(!marker.exists());
    }

    fn report(status: RunStatus, oom_kills: u64) -> pdl_sandbox::RunReport {
        let mut report = pdl_sandbox::RunReport::not_started(
            status,
            Path::new("/nonexistent"),
            pdl_sandbox::Enforcement::default(),
        );
        report.oom_kills = oom_kills;
        report
    }

    #[test]
    fn a_helper_killed_while_the_run_was_out_of_memory_is_the_runs_doing() {
        let killed = RunStatus::SandboxFailed {
            reason: "the sandbox helper was killed by signal 9".into(),
        };
        assert_eq!(
            attributed_status(&report(killed.clone(), 2)),
            RunStatus::OutOfMemory
        );
        // Without an OOM kill, or another failure, it stays the harness's.
        assert_eq!(attributed_status(&report(killed.clone(), 0)), killed);
        for reason in [
            "the sandbox helper was killed by signal 15",
            "the sandbox helper exited with code 1 before the command finished",
            "cannot mount /tmp: No space left on device",
        ] {
            let failed = RunStatus::SandboxFailed {
                reason: reason.into(),
            };
            assert_eq!(attributed_status(&report(failed.clone(), 3)), failed);
        }
        let exited = RunStatus::Exited { code: 0 };
        assert_eq!(attributed_status(&report(exited.clone(), 1)), exited);
    }

    #[test]
    fn the_final_patch_is_computed_outside_the_agents_repository() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let files = vec![
            RepoFile {
                path: "src/a.py".into(),
                content: "a = 1\n".into(),
            },
            RepoFile {
                path: "README.md".into(),
                content: "r\n".into(),
            },
        ];
        prepare_workspace(&files, &ws).unwrap();
        assert!(ws.join(".git").is_dir());
        std::fs::write(ws.join("src/a.py"), "a = 2\n").unwrap();
        std::fs::write(ws.join("src/new.py"), "n = 0\n").unwrap();
        std::fs::remove_file(ws.join("README.md")).unwrap();
        // A hostile repository configuration must never run on the host.
        let marker = dir.path().join("pwned");
        let config = format!(
            "[core]\n\tfsmonitor = touch {}\n\tpager = touch {}\n",
            marker.display(),
            marker.display()
        );
        std::fs::write(ws.join(".git/config"), config).unwrap();
        let policy = pdl_grader::PatchPolicy::new(&["**".to_string()], &[]).unwrap();
        // A dropped file is listed, never copied into the patch.
        let only_src = pdl_grader::PatchPolicy::new(&["src/**".to_string()], &[]).unwrap();
        std::fs::write(ws.join("notes.bin"), vec![7u8; 4096]).unwrap();
        let limits = pdl_grader::changes::TreeLimits::default();
        let narrow = final_patch(&files, &only_src, &ws, dir.path(), &limits).unwrap();
        assert!(
            !narrow.contains("notes.bin") && narrow.contains("src/new.py"),
            "{narrow}"
        );
        std::fs::remove_file(ws.join("notes.bin")).unwrap();
        let patch = final_patch(&files, &policy, &ws, dir.path(), &limits).unwrap();
        assert!(!marker.exists());
        assert!(
            patch.contains("diff --git a/src/a.py b/src/a.py"),
            "{patch}"
        );
        assert!(patch.contains("+a = 2"));
        assert!(patch.contains("new file mode") && patch.contains("b/src/new.py"));
        assert!(patch.contains("deleted file mode"));
        let set = pdl_task::diff::parse_patch(&patch).unwrap();
        assert_eq!(set.strip, 1);
        let paths: Vec<_> = set
            .files
            .iter()
            .flat_map(|f| f.touched_paths().into_iter().map(str::to_string))
            .collect();
        assert_eq!(paths, vec!["README.md", "src/a.py", "src/new.py"]);
    }
}
