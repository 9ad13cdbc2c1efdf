//! The built-in agent ([`run_builtin`]): a tool-calling loop through the gateway.
//!
//! The system prompt gives the issue, the patch policy and the token budget; the
//! prompt's version ([`prompt_version`]) is a hash of its template and the tool
//! descriptions, recorded in every episode's provenance. The loop ends when the
//! model calls `finish` (or stops calling tools), when the gateway refuses
//! because the budget is spent, or at the step or wall-clock limit.

use std::time::Instant;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::agent::chat::{ChatClient, ChatError, Conversation};
use crate::agent::tools::{tool_specs, ToolOutcome, Toolbox};
use crate::agent::{AgentRun, EndReason, EpisodeLimits, TaskBrief};
use crate::provider::ApiKind;

const SYSTEM_TEMPLATE: &str = "\
You are a careful software engineer working in a Python repository checked out at the \
current directory (a git repository; `git diff` shows your changes). Fix the issue below.

Work method: read the code, reproduce the problem (write a small script or run the tests \
with `python -m pytest -q`), make the smallest correct change, run the public tests again, \
then call `finish`. You have no network access.

Patch policy: only changes to paths matching {allowed} are graded; changes to {forbidden} \
make the whole submission invalid. Do not edit tests.

Token budget: {budget} tokens in all (input and output). When it is spent you are stopped \
and the repository is graded as it stands.

<issue>
{issue}
</issue>";

const FIRST_MESSAGE: &str = "Please fix the issue. Use the tools; call `finish` when you are done.";
const NUDGE: &str = "Continue with the tools, or call `finish` if the fix is complete.";
/// Replies without a tool call accepted before the agent counts as finished.
const MAX_NUDGES: usize = 2;
/// The output cap the agent asks for on each call (the gateway may clamp it).
const MAX_TOKENS_PER_CALL: u64 = 4096;

/// The version of the prompt and tools: a short hash, recorded in provenance.
pub fn prompt_version() -> String {
    let mut h = Sha256::new();
    h.update(SYSTEM_TEMPLATE.as_bytes());
    h.update(FIRST_MESSAGE.as_bytes());
    h.update(NUDGE.as_bytes());
    for t in tool_specs() {
        h.update(t.name.as_bytes());
        h.update(t.description.as_bytes());
        h.update(t.parameters.to_string().as_bytes());
    }
    format!("builtin-{}", &hex::encode(h.finalize())[..12])
}

fn system_prompt(brief: &TaskBrief) -> String {
    let list = |v: &[String]| {
        if v.is_empty() {
            "(none)".to_string()
        } else {
            v.join(", ")
        }
    };
    SYSTEM_TEMPLATE
        .replace("{allowed}", &list(&brief.allowed))
        .replace("{forbidden}", &list(&brief.forbidden))
        .replace("{budget}", &brief.token_budget.to_string())
        .replace("{issue}", &brief.problem_statement)
}

/// Runs the built-in agent until it ends. `budget_spent` is asked after every
/// call (the gateway's meter).
pub fn run_builtin(
    client: &ChatClient,
    api: ApiKind,
    model: &str,
    brief: &TaskBrief,
    tools: &Toolbox,
    limits: &EpisodeLimits,
    budget_spent: &dyn Fn() -> bool,
) -> AgentRun {
    let started = Instant::now();
    let mut conversation = Conversation::new(
        system_prompt(brief),
        tool_specs(),
        FIRST_MESSAGE.to_string(),
    );
    let mut nudges = 0;
    let end = |reason: EndReason, steps: usize, error: Option<String>, summary: Option<String>| {
        AgentRun {
            end_reason: reason,
            steps,
            error,
            summary,
            wall_s: started.elapsed().as_secs_f64(),
        }
    };
    for step in 1..=limits.max_steps {
        // A harness asked to stop makes no further model call (the episode's
        // record is dropped by the campaign's executor).
        if pdl_sandbox::interrupt::requested() {
            return end(
                EndReason::AgentError,
                step - 1,
                Some("the harness was interrupted".into()),
                None,
            );
        }
        if started.elapsed() >= limits.wall_time {
            return end(EndReason::TimeLimit, step - 1, None, None);
        }
        if budget_spent() {
            return end(EndReason::BudgetExhausted, step - 1, None, None);
        }
        let body: Value = conversation.request_body(api, model, MAX_TOKENS_PER_CALL);
        let reply = match client.send(&body) {
            Ok(r) => r,
            Err(ChatError::BudgetExhausted(_)) => {
                return end(EndReason::BudgetExhausted, step - 1, None, None)
            }
            Err(e) => {
                let reason = if budget_spent() {
                    EndReason::BudgetExhausted
                } else {
                    EndReason::AgentError
                };
                return end(reason, step - 1, Some(e.to_string()), None);
            }
        };
        conversation.push_reply(&reply);
        if reply.calls.is_empty() {
            nudges += 1;
            if nudges > MAX_NUDGES {
                return end(EndReason::Finished, step, None, reply.text.clone());
            }
            conversation.push_user(NUDGE.to_string());
            continue;
        }
        let mut finished = None;
        for call in &reply.calls {
            if finished.is_some() {
                conversation.push_tool_result(&call.id, "skipped: finish was called".into());
                continue;
            }
            match tools.run(&call.name, &call.arguments) {
                ToolOutcome::Output(text) => conversation.push_tool_result(&call.id, text),
                ToolOutcome::Finish(summary) => {
                    conversation.push_tool_result(&call.id, "finished".into());
                    finished = Some(summary);
                }
            }
            if started.elapsed() >= limits.wall_time {
                return end(EndReason::TimeLimit, step, None, None);
            }
        }
        if let Some(summary) = finished {
            return end(EndReason::Finished, step, None, Some(summary));
        }
    }
    end(EndReason::StepLimit, limits.max_steps, None, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_version_is_stable_and_the_prompt_carries_the_brief() {
        assert_eq!(prompt_version(), prompt_version());
        assert!(prompt_version().starts_with("builtin-"));
        let brief = TaskBrief {
            problem_statement: "mul is wrong".into(),
            allowed: vec!["src/**".into()],
            forbidden: vec!["tests/**".into()],
            token_budget: 1234,
        };
        let p = system_prompt(&brief);
        assert!(
            p.contains("mul is wrong")
                && p.contains("src/**")
                && p.contains("tests/**")
                && p.contains("1234")
        );
    }
}
