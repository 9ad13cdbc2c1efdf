//! What an agent sees of a task, written to a folder: [`write_agent_view`].
//!
//! An independent solver (a person, or an agent run outside any campaign) gets
//! exactly what an episode's agent gets: the repository as a git repository
//! with one base commit, the issue, the patch policy and the token budget.
//! Nothing else of the task leaves the dataset: no hidden test, no reference
//! patch, no ladder rung, no tier.

use std::io;
use std::path::Path;

use pdl_task::Task;

use super::{prepare_workspace, TaskBrief};

/// Writes the agent's view of `task` into `dir`, which must not exist yet or
/// be empty: `repo/` (the task's files, one commit), `ISSUE.md` (the issue as
/// the agent receives it), `TASK.md` (the policy and the budget in prose) and
/// `task.json` (the same for programs).
pub fn write_agent_view(task: &Task, dir: &Path) -> io::Result<()> {
    // Never through a link: a view lands where it is asked to, or nowhere.
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if !meta.is_dir() => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: not a folder (a link or a file)", dir.display()),
            ))
        }
        Ok(_) if std::fs::read_dir(dir)?.next().is_some() => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: the folder is not empty", dir.display()),
            ))
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::create_dir(dir)?;
        }
        Err(e) => return Err(e),
    }
    let brief = TaskBrief {
        problem_statement: task.row.problem_statement.clone(),
        allowed: task.row.patch_policy_allowed.clone(),
        forbidden: task.row.patch_policy_forbidden.clone(),
        token_budget: task.row.token_budget.max(0) as u64,
    };
    prepare_workspace(&task.row.files, &dir.join("repo"))?;
    let root = pdl_fs::Dir::open(dir)?;
    root.write(Path::new("ISSUE.md"), issue_text(&brief).as_bytes())
        .map_err(io::Error::other)?;
    root.write(
        Path::new("TASK.md"),
        task_text(&task.row.task_id, &brief).as_bytes(),
    )
    .map_err(io::Error::other)?;
    let json = serde_json::json!({
        "task_id": task.row.task_id,
        "instance_id": task.row.instance_id,
        "token_budget": brief.token_budget,
        "patch_policy": {"allowed": brief.allowed, "forbidden": brief.forbidden},
        "repository": "repo",
        "issue": "ISSUE.md",
    });
    let mut bytes = serde_json::to_vec_pretty(&json).map_err(io::Error::other)?;
    bytes.push(b'\n');
    root.write(Path::new("task.json"), &bytes)
        .map_err(io::Error::other)?;
    Ok(())
}

fn issue_text(brief: &TaskBrief) -> String {
    let mut text = brief.problem_statement.trim_end().to_string();
    text.push('\n');
    text
}

fn task_text(task_id: &str, brief: &TaskBrief) -> String {
    let list = |globs: &[String]| {
        if globs.is_empty() {
            "- (none)\n".to_string()
        } else {
            globs.iter().map(|g| format!("- `{g}`\n")).collect()
        }
    };
    format!(
        "# {task_id}\n\n\
         Fix the issue in `ISSUE.md` in the repository under `repo/` (a git repository \
         with one commit: your change is its diff against that commit).\n\n\
         ## What you may change\n\n{}\n\
         ## What you must not change\n\n{}\n\
         Changes elsewhere are left out of grading; a change to a path you must not \
         change fails the attempt.\n\n\
         ## Token budget\n\n{} tokens, input and output together, for the whole attempt.\n",
        list(&brief.allowed),
        list(&brief.forbidden),
        brief.token_budget
    )
}
