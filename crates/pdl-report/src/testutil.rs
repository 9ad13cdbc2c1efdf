//! Record builders for the unit tests.

use pdl_grader::{Components, PolicyReport, ResultRecord, SubmissionKind, Verdict};
use serde_json::json;

/// A graded record of `kind` (`gold`, `noop`, `rung`, `prediction`, `episode`).
pub fn record(instance_id: &str, kind: &str, reward: f64) -> ResultRecord {
    let kind: SubmissionKind = serde_json::from_value(json!(kind)).unwrap();
    ResultRecord {
        instance_id: instance_id.to_string(),
        model_name_or_path: None,
        kind,
        name: kind.name().to_string(),
        reward,
        components: Components::default(),
        verdict: Verdict::Graded,
        detail: None,
        tests: Default::default(),
        policy: PolicyReport::default(),
        landed_rung: None,
        compile_errors: Vec::new(),
        collection_errors: Vec::new(),
        duration_s: 1.0,
        phases_s: Default::default(),
        provenance: Default::default(),
        suspicious: Vec::new(),
        episode: None,
        job_key: None,
    }
}

/// An episode record of `agent` on `instance_id`, sample `sample`, with model
/// `gpt-x`, 1000 tokens in, 100 out, a budget of 5000 and end reason `finished`.
pub fn episode(instance_id: &str, agent: &str, sample: u64, reward: f64) -> ResultRecord {
    let mut r = record(instance_id, "episode", reward);
    let key = format!("{instance_id}/{agent}/gpt-x/{sample}");
    r.name = key.clone();
    r.model_name_or_path = Some("gpt-x".to_string());
    r.episode = Some(episode_info(json!({
        "key": key, "agent": agent, "model": "gpt-x", "sample": sample,
        "tokens_in": 1000, "tokens_out": 100, "token_budget": 5000,
        "end_reason": "finished", "steps": 4, "wall_s": 2.5,
        "trajectory": format!("trajectories/{instance_id}/{agent}-{sample}.jsonl"),
        "patch": format!("patches/{instance_id}-{agent}-{sample}.diff"),
        "error": null,
    })));
    r
}

/// An episode object read from JSON, as a reader would.
pub fn episode_info(value: serde_json::Value) -> pdl_grader::EpisodeInfo {
    serde_json::from_value(value).unwrap()
}

/// Sets one field of a record's episode object (as if the file had held
/// `value` there).
pub fn set_episode_field(r: &mut ResultRecord, field: &str, value: serde_json::Value) {
    let mut object = serde_json::to_value(r.episode.as_ref().unwrap()).unwrap();
    object[field] = value;
    r.episode = Some(episode_info(object));
}
