//! `pdl-swe run`: campaigns of episodes.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use pdl_episode::agent::{EpisodeLimits, ExternalAgent};
use pdl_episode::campaign::{
    check_hidden_inputs, check_private_folders, make_private, run_campaign, AgentSpec,
    CampaignSettings, FolderAccess,
};
use pdl_episode::{ApiKind, GatewayLimits, UpstreamConfig};

use crate::cli::{ApiChoice, Format, RunCampaignArgs};
use crate::commands::{report_load_errors, select};
use crate::exit::{self, ExitError};
use crate::progress::CampaignBars;
use crate::render::print_json;
use crate::settings::{load_dataset, resolve_exposing};

fn seconds(value: f64, flag: &str) -> Result<Duration, ExitError> {
    match Duration::try_from_secs_f64(value) {
        Ok(d) if value > 0.0 => Ok(d),
        _ => Err(ExitError::usage(anyhow::anyhow!(
            "{flag} must be a positive number of seconds, not {value}"
        ))),
    }
}

fn max_request_bytes(mib: usize) -> Result<usize, ExitError> {
    match mib.checked_mul(1 << 20) {
        Some(bytes) if (1..=1024).contains(&mib) => Ok(bytes),
        _ => Err(ExitError::usage(anyhow::anyhow!(
            "--max-request-mib must be from 1 to 1024, not {mib}"
        ))),
    }
}

/// Runs `run`.
pub fn run(args: &RunCampaignArgs) -> Result<i32, ExitError> {
    let mut agents: Vec<AgentSpec> = args.agents.iter().map(|_| AgentSpec::Builtin).collect();
    agents.dedup_by(|a, b| a.label() == b.label());
    let mut agent_env = Vec::new();
    for pair in &args.agent_env {
        let (k, v) = pair
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| {
                ExitError::usage(anyhow::anyhow!(
                    "--agent-env takes NAME=VALUE, not `{pair}`"
                ))
            })?;
        agent_env.push((k.to_string(), v.to_string()));
    }
    for command in &args.agent_cmds {
        agents.push(AgentSpec::Command(ExternalAgent {
            command: command.clone(),
            env: agent_env.clone(),
            readable: args.agent_paths.clone(),
        }));
    }
    if agents.is_empty() {
        return Err(ExitError::usage(anyhow::anyhow!(
            "name at least one agent: --agent builtin or --agent-cmd 'COMMAND'"
        )));
    }
    if args.samples == 0 {
        return Err(ExitError::usage(anyhow::anyhow!(
            "--samples must be at least 1"
        )));
    }
    let api = match args.api {
        ApiChoice::Openai => ApiKind::OpenAi,
        ApiChoice::Anthropic => ApiKind::Anthropic,
    };
    let base_url = args.base_url.clone().unwrap_or_else(|| match api {
        ApiKind::OpenAi => "https://api.openai.com/v1".into(),
        ApiKind::Anthropic => "https://api.anthropic.com/v1".into(),
    });
    let key_var = args.api_key_env.clone().unwrap_or_else(|| match api {
        ApiKind::OpenAi => "OPENAI_API_KEY".into(),
        ApiKind::Anthropic => "ANTHROPIC_API_KEY".into(),
    });
    let api_key = std::env::var(&key_var).ok().filter(|k| !k.is_empty());
    if args.api_key_env.is_some() && api_key.is_none() {
        return Err(ExitError::usage(anyhow::anyhow!(
            "--api-key-env {key_var}: the variable is not set"
        )));
    }
    let mut upstream = UpstreamConfig::new(api, base_url);
    upstream.api_key = api_key;
    upstream.request_timeout = seconds(args.upstream_timeout, "--upstream-timeout")?;
    let limits = EpisodeLimits {
        max_steps: args.max_steps.max(1),
        wall_time: seconds(args.episode_timeout, "--episode-timeout")?,
        shell_timeout: seconds(args.shell_timeout, "--shell-timeout")?,
    };
    let mut allowed_provider_tools = std::collections::BTreeSet::new();
    for name in &args.allow_provider_tools {
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(ExitError::usage(anyhow::anyhow!(
                "--allow-provider-tool takes a tool name such as `web_search`, not `{name}`"
            )));
        }
        allowed_provider_tools.insert(name.clone());
    }
    // Agents must not read the run folder or the work folder: checked before
    // anything is created, then again for the work folder the harness made.
    // The system folders are checked before anything is created; folders an
    // agent path exposes are refused unless their mode can keep agents out,
    // and then made 0700 before the campaign writes in them.
    check_private_folders(
        &args.out,
        args.run.work_dir.as_deref(),
        &args.agent_paths,
        // The most this check can allow; the second one knows the sandbox.
        FolderAccess::ModeKeepsAgentsOut,
    )
    .map_err(ExitError::usage)?;
    check_hidden_inputs(
        args.dataset.dataset.as_deref(),
        &args
            .run
            .cache_dir
            .clone()
            .unwrap_or_else(crate::settings::default_cache_dir),
        &args.agent_paths,
    )
    .map_err(ExitError::usage)?;
    let mut ds = load_dataset(&args.dataset)?;
    select(&mut ds, &args.tasks)?;
    report_load_errors(&ds.errors);
    let settings = resolve_exposing(&args.run, &args.agent_paths)?;
    let private = check_private_folders(
        &args.out,
        Some(settings.grader.work_root()),
        &args.agent_paths,
        FolderAccess::of(settings.runner.as_ref()),
    )
    .map_err(ExitError::usage)?;
    make_private(&private).map_err(|e| ExitError::usage(anyhow::anyhow!(e)))?;
    let campaign = CampaignSettings {
        run_dir: args.out.clone(),
        agents,
        samples: args.samples,
        model: args.model.clone(),
        upstream,
        parallelism: settings.parallelism,
        limits,
        keep_workspaces: args.keep_workspaces,
        dataset: ds.source.clone(),
        allowed_provider_tools,
        gateway_limits: GatewayLimits {
            max_request_bytes: max_request_bytes(args.max_request_mib)?,
            ..GatewayLimits::default()
        },
        scratch: pdl_sandbox::ScratchBounds {
            bytes: args.episode_disk_mib << 20,
            inodes: args.episode_inodes,
        },
        shard: args.shard,
    };
    let mut bars = CampaignBars::new(&args.out);
    let outcome = run_campaign(
        &campaign,
        &ds.tasks,
        &settings.grader,
        settings.runner.clone(),
        |event| bars.on_event(event),
    )
    .context("the campaign could not run");
    bars.finish();
    if crate::interrupt::requested() {
        return Err(crate::interrupt::stopped(&format!(
            "the records of finished episodes are in {}; run the same command again to resume",
            args.out.join("results.jsonl").display()
        )));
    }
    let outcome = outcome?;
    let tiers: BTreeMap<String, String> = ds
        .tasks
        .iter()
        .map(|t| (t.row.instance_id.clone(), t.row.tier.clone()))
        .collect();
    let report = pdl_report::RunReport::load(&args.out, &tiers).map_err(anyhow::Error::from)?;
    pdl_report::write_all(&report, &args.out.join("report")).map_err(anyhow::Error::from)?;
    match args.format {
        Format::Json => print_json(&pdl_report::to_json(&report))?,
        Format::Table => {
            println!("{}", pdl_report::render_table(&report));
            println!(
                "{} new records, {} in all, in {} (report: {})",
                outcome.new_records,
                outcome.records.len(),
                args.out.join("results.jsonl").display(),
                args.out.join("report/index.html").display()
            );
        }
    }
    // Counted after de-duplication: a harness error run again is replaced by
    // its later record.
    let harness_errors = report.counts.harness_errors > 0;
    Ok(if harness_errors {
        exit::FAILURES
    } else {
        exit::SUCCESS
    })
}
