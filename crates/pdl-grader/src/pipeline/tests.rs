//! The resume-key rule (a planned job and its record agree, records written
//! before `job_key` existed resume alike) and the event stream.

use std::collections::HashSet;
use std::sync::Arc;

use pdl_task::{InstanceRow, RepoFile, Task, TaskExtras};

use super::*;
use crate::grade::{GradeSettings, SubmissionContent};
use crate::record::EpisodeInfo;

fn task(id: &str) -> Task {
    Task {
        row: InstanceRow {
            instance_id: format!("{id}-v1"),
            task_id: id.into(),
            task_version: 1,
            tier: "T1".into(),
            domain: "d".into(),
            problem_statement: "p".into(),
            patch: "diff --git a/src/a.py b/src/a.py\n".into(),
            test_patch: String::new(),
            fail_to_pass: vec!["tests/hidden/test_h.py::test_h".into()],
            pass_to_pass: vec![],
            files: vec![RepoFile {
                path: "src/a.py".into(),
                content: "x\n".into(),
            }],
            patch_policy_allowed: vec!["src/**".into()],
            patch_policy_forbidden: vec![],
            token_budget: 1000,
            hidden_test_count: 1,
            public_test_count: 0,
            graded_ladder_rungs: vec![],
            reward_formula: "1*build_health".into(),
        },
        extras: TaskExtras::default(),
    }
}

/// A grader that is never asked to grade (the jobs below need none).
fn idle_grader(work: &std::path::Path) -> Grader {
    let interpreter = crate::PythonInterpreter {
        executable: "/nonexistent/python3".into(),
        version: "3.0.0".into(),
        base_prefix: "/nonexistent".into(),
    };
    Grader::new(
        GradeSettings {
            work_root: work.to_path_buf(),
            keep_workdirs: false,
            test_timeout: None,
            limits: Default::default(),
            tree_limits: Default::default(),
            patch_limits: Default::default(),
        },
        Arc::new(crate::EnvManager::new(work.join("cache"), interpreter)),
        Arc::new(pdl_sandbox::PlainRunner),
    )
}

/// The record a job's execution would write, as far as its key goes.
fn record_of(tasks: &[Task], job: &Job) -> ResultRecord {
    let t = job.task.map(|t| &tasks[t]);
    let mut r = match &job.kind {
        JobKind::Invalid(invalid) => invalid_record(invalid, t),
        _ => invalid_record(
            &InvalidJob {
                instance_id: t.unwrap().row.instance_id.clone(),
                model_name_or_path: None,
                detail: String::new(),
                submission_digest: String::new(),
            },
            t,
        ),
    };
    match &job.kind {
        JobKind::Grade { submission, .. } => {
            r.kind = submission.kind;
            r.name = submission.name.clone();
            r.model_name_or_path = submission.model_name_or_path.clone();
            r.provenance.submission_digest = submission.digest();
            r.verdict = Verdict::Graded;
        }
        JobKind::Episode(e) => {
            r.kind = SubmissionKind::Episode;
            r.name = e.agent_label.clone();
            r.model_name_or_path = Some(e.model.clone());
            r.episode = Some(EpisodeInfo {
                key: Some(e.episode_key.clone()),
                ..EpisodeInfo::default()
            });
        }
        JobKind::Collect | JobKind::Invalid(_) => {}
    }
    r
}

fn episode_job(task: usize, sample: usize) -> Job {
    Job::episode(
        task,
        EpisodeJob {
            agent: 0,
            agent_label: "builtin".into(),
            model: "gpt-x".into(),
            sample,
            episode_key: format!("{sample:020}"),
            previous: Vec::new(),
        },
    )
}

fn every_kind_of_job(tasks: &[Task]) -> Vec<Job> {
    let prediction = Submission {
        kind: SubmissionKind::Prediction,
        name: "m".into(),
        model_name_or_path: Some("m".into()),
        content: SubmissionContent::Patch("diff".into()),
    };
    let mut rung = Submission::noop();
    rung.kind = SubmissionKind::Rung;
    rung.name = "half.diff".into();
    vec![
        Job::grade(tasks, 0, Submission::gold(&tasks[0]), 0),
        Job::grade(tasks, 0, Submission::noop(), 0),
        Job::grade(tasks, 0, rung, 0),
        Job::grade(tasks, 1, prediction, 0),
        episode_job(1, 3),
        Job::invalid(
            None,
            InvalidJob {
                instance_id: "gone-v1".into(),
                model_name_or_path: None,
                detail: "line 2: unknown instance".into(),
                submission_digest: "sha256:00".into(),
            },
        ),
    ]
}

#[test]
fn a_planned_job_and_its_record_have_one_key() {
    let tasks = [task("a"), task("b")];
    let jobs = every_kind_of_job(&tasks);
    let keys: HashSet<&JobKey> = jobs.iter().map(|j| &j.key).collect();
    assert_eq!(keys.len(), jobs.len(), "every job has its own key");
    for job in &jobs {
        let record = record_of(&tasks, job);
        assert_eq!(
            JobKey::of_record(&record).as_ref(),
            Some(&job.key),
            "{job:?}"
        );
    }
    // Repetitions are the same job measured again.
    let again = Job::grade(&tasks, 0, Submission::gold(&tasks[0]), 1);
    assert_eq!(again.key, jobs[0].key);
    // Another task version is another job.
    let mut changed = tasks.clone();
    changed[0].row.problem_statement.push('!');
    assert_ne!(
        Job::grade(&changed, 0, Submission::gold(&changed[0]), 0).key,
        jobs[0].key
    );
}

#[test]
fn the_rule_is_stable_across_releases() {
    // Keys are written into results files: changing the rule silently would
    // make every earlier file resume nothing. The values were computed
    // independently from the rule in the module docs.
    assert_eq!(
        JobKey::prediction("a-v1", "m", "sha256:00").as_str(),
        "prediction:810b14f82083803ea8e7ba1355f971e3"
    );
    assert_eq!(
        JobKey::episode("0123456789abcdef0123").as_str(),
        "episode:cb101d7aadb1cd1c451ce7d50a948590"
    );
}

#[test]
fn records_written_before_job_key_existed_resume() {
    let tasks = [task("a"), task("b")];
    let jobs = every_kind_of_job(&tasks);
    for job in &jobs {
        let mut record = record_of(&tasks, job);
        record.job_key = None;
        let line = serde_json::to_string(&record).unwrap();
        assert!(!line.contains("job_key"), "{line}");
        let read: ResultRecord = serde_json::from_str(&line).unwrap();
        let done = done_keys([&read], Resume::Every);
        let mut phase = PhasePlan::new(Phase::Predictions, true);
        phase.push_unless_done(job.clone(), &done);
        assert_eq!((phase.jobs.len(), phase.skipped), (0, 1), "{job:?}");
    }
}

#[test]
fn harness_errors_run_again_only_where_asked() {
    let tasks = [task("a")];
    let job = episode_job(0, 0);
    let mut record = record_of(&tasks, &job);
    record.verdict = Verdict::HarnessError;
    assert!(done_keys([&record], Resume::Every).contains(&job.key));
    assert!(!done_keys([&record], Resume::RetryHarnessErrors).contains(&job.key));
    // An episode record without its key resumes nothing.
    record.verdict = Verdict::Graded;
    record.episode = None;
    assert!(done_keys([&record], Resume::Every).is_empty());
}

/// Episodes that finish at once, with a warning when they start.
struct InstantEpisodes;

struct InstantSession;

impl EpisodeRunner for InstantEpisodes {
    fn start<'s>(
        &'s self,
        warn: &mut dyn FnMut(String),
    ) -> Result<Box<dyn EpisodeSession + 's>, PipelineError> {
        warn("started".into());
        Ok(Box::new(InstantSession))
    }
}

impl EpisodeSession for InstantSession {
    fn run(&self, task: &Task, job: &EpisodeJob, _: &LadderFingerprints) -> ResultRecord {
        let mut r = invalid_record(
            &InvalidJob {
                instance_id: task.row.instance_id.clone(),
                model_name_or_path: Some(job.model.clone()),
                detail: String::new(),
                submission_digest: String::new(),
            },
            Some(task),
        );
        r.kind = SubmissionKind::Episode;
        r.verdict = Verdict::Graded;
        r.episode = Some(EpisodeInfo {
            key: Some(job.episode_key.clone()),
            ..EpisodeInfo::default()
        });
        r
    }
}

#[derive(Default)]
struct MemorySink {
    records: Vec<ResultRecord>,
    fail: bool,
}

impl RecordSink for MemorySink {
    fn append(&mut self, record: &ResultRecord) -> std::io::Result<()> {
        if self.fail {
            return Err(std::io::Error::other("disk full"));
        }
        self.records.push(record.clone());
        Ok(())
    }
}

fn two_phase_plan(tasks: &[Task]) -> Plan {
    let mut plan = Plan::default();
    let done = done_keys(
        [&record_of(tasks, &episode_job(0, 9))],
        Resume::RetryHarnessErrors,
    );
    let predictions = plan.phase_mut(Phase::Predictions, true);
    for i in 0..3 {
        predictions.push_unless_done(
            Job::invalid(
                Some(0),
                InvalidJob {
                    instance_id: tasks[0].row.instance_id.clone(),
                    model_name_or_path: Some("m".into()),
                    detail: format!("line {i}: bad"),
                    submission_digest: format!("sha256:{i}"),
                },
            ),
            &done,
        );
    }
    let episodes = plan.phase_mut(Phase::Episodes, true);
    for sample in [0, 1, 9] {
        episodes.push_unless_done(episode_job(0, sample), &done);
    }
    plan
}

#[test]
fn the_event_stream_tells_the_whole_run_in_order() {
    let work = tempfile::tempdir().unwrap();
    let grader = idle_grader(work.path());
    let tasks = [task("a")];
    let plan = two_phase_plan(&tasks);
    let pipeline = Pipeline {
        grader: &grader,
        tasks: &tasks,
        parallelism: 2,
        episodes: Some(&InstantEpisodes),
    };
    let mut sink = MemorySink::default();
    let mut seen = Vec::new();
    let mut started = HashSet::new();
    let mut stats = RunStats::default();
    let outcome = pipeline
        .run(&plan, &mut sink, &mut |event| {
            stats.on_event(&event);
            seen.push(match &event {
                Event::PlanStarted { phases } => format!(
                    "plan {:?}",
                    phases
                        .iter()
                        .map(|p| (p.phase.name(), p.total, p.skipped))
                        .collect::<Vec<_>>()
                ),
                Event::PhaseStarted(p) => format!("phase {}", p.phase.name()),
                Event::JobStarted { job, .. } => {
                    assert!(started.insert(job.key.clone()), "started twice");
                    "start".into()
                }
                Event::Recorded { job, record, .. } => {
                    assert!(started.contains(&job.key), "recorded before it started");
                    assert_eq!(record.job_key.as_deref(), Some(job.key.as_str()));
                    "record".into()
                }
                Event::Measured { .. } => "measured".into(),
                Event::Warning(w) => format!("warning {w}"),
            });
        })
        .unwrap();
    let squeezed: Vec<&str> = seen
        .iter()
        .map(String::as_str)
        .filter(|s| *s != "start")
        .collect();
    assert_eq!(
        squeezed,
        [
            "plan [(\"predictions\", 3, 0), (\"episodes\", 2, 1)]",
            "phase predictions",
            "record",
            "record",
            "record",
            "phase episodes",
            "warning started",
            "record",
            "record",
        ]
    );
    assert_eq!(seen.iter().filter(|s| *s == "start").count(), 5);
    // Every record reached the sink, with its key, and the outcome.
    assert_eq!(sink.records.len(), 5);
    assert!(sink
        .records
        .iter()
        .all(|r| r.job_key == JobKey::of_record(r).map(|k| k.to_string())));
    assert_eq!(outcome.records().count(), 5);
    assert_eq!(outcome.stats, stats);
    assert_eq!(
        (stats.planned, stats.skipped, stats.started, stats.recorded),
        (5, 1, 5, 5)
    );
    assert_eq!(stats.verdicts["invalid_prediction"], 3);
    assert_eq!(stats.harness_errors(), 0);
    assert!(!outcome.interrupted);
}

#[test]
fn a_write_error_stops_the_run_after_its_phase() {
    let work = tempfile::tempdir().unwrap();
    let grader = idle_grader(work.path());
    let tasks = [task("a")];
    let plan = two_phase_plan(&tasks);
    let pipeline = Pipeline {
        grader: &grader,
        tasks: &tasks,
        parallelism: 1,
        episodes: Some(&InstantEpisodes),
    };
    let mut sink = MemorySink {
        fail: true,
        ..MemorySink::default()
    };
    let mut phases = Vec::new();
    let result = pipeline.run(&plan, &mut sink, &mut |event| {
        if let Event::PhaseStarted(p) = event {
            phases.push(p.phase);
        }
    });
    assert!(matches!(result, Err(PipelineError::Write(_))));
    assert_eq!(phases, [Phase::Predictions]);
}

#[test]
fn episodes_need_a_runner() {
    let work = tempfile::tempdir().unwrap();
    let grader = idle_grader(work.path());
    let tasks = [task("a")];
    let mut plan = Plan::default();
    plan.phase_mut(Phase::Episodes, true)
        .jobs
        .push(episode_job(0, 0));
    let pipeline = Pipeline {
        grader: &grader,
        tasks: &tasks,
        parallelism: 1,
        episodes: None,
    };
    let result = pipeline.run(&plan, &mut MemorySink::default(), &mut |_| {});
    assert!(matches!(result, Err(PipelineError::Episodes(_))));
}

/// A campaign-shaped plan: every task's ladder (recorded), its gold and
/// do-nothing, then three episodes per task.
fn campaign_plan(tasks: &[Task]) -> Plan {
    let order: Vec<usize> = (0..tasks.len()).collect();
    let mut plan = Plan::default();
    plan.add_ladders(tasks, &order, true, &HashSet::new());
    let calibration = plan.phase_mut(Phase::Calibration, true);
    for t in 0..tasks.len() {
        calibration
            .jobs
            .push(Job::grade(tasks, t, Submission::gold(&tasks[t]), 0));
        calibration
            .jobs
            .push(Job::grade(tasks, t, Submission::noop(), 0));
    }
    let episodes = plan.phase_mut(Phase::Episodes, true);
    for t in 0..tasks.len() {
        for sample in 0..3 {
            episodes.jobs.push(Job::episode(
                t,
                EpisodeJob {
                    agent: 0,
                    agent_label: "builtin".into(),
                    model: "m".into(),
                    sample,
                    episode_key: format!("{t}-{sample}"),
                    previous: Vec::new(),
                },
            ));
        }
    }
    plan
}

fn laddered(id: &str) -> Task {
    let mut t = task(id);
    t.extras.ladder = vec![pdl_task::LadderRung {
        name: "half.diff".into(),
        reward: 0.5,
        note: String::new(),
        diff: "diff --git a/src/a.py b/src/a.py\n".into(),
    }];
    t.row.graded_ladder_rungs = vec!["half.diff".into()];
    t
}

#[test]
fn shards_are_disjoint_cover_the_plan_and_measure_the_ladders_they_need() {
    let tasks: Vec<Task> = (0..7).map(|i| laddered(&format!("t{i}"))).collect();
    let whole = campaign_plan(&tasks);
    let all = whole.recorded_keys();
    for count in [1, 2, 3, 5] {
        let mut seen: Vec<JobKey> = Vec::new();
        for shard in shard::Shard::all(count) {
            let slice = whole.clone().shard(&tasks, shard);
            let manifest = ShardManifest::new("run", shard, &whole, &tasks);
            let mine = slice.recorded_keys();
            assert_eq!(
                mine.iter()
                    .map(|k| k.as_str().to_string())
                    .collect::<Vec<_>>(),
                manifest.assigned,
                "the manifest names exactly the slice's records, in plan order"
            );
            // A task's ladder, gold and do-nothing stay together.
            for phase in slice.phases.iter().filter(|p| p.recorded) {
                for job in &phase.jobs {
                    if phase.phase != Phase::Episodes {
                        let t = job.task.unwrap();
                        assert!(shard.owns(&format!("task:{}", tasks[t].row.task_id)));
                    }
                }
            }
            // Every graded job's ladder is measured here, recorded or not.
            let measured: HashSet<usize> = slice
                .phases
                .iter()
                .filter(|p| p.phase == Phase::Ladder)
                .flat_map(|p| p.jobs.iter().filter_map(|j| j.task))
                .collect();
            for job in slice
                .phases
                .iter()
                .filter(|p| p.phase != Phase::Ladder)
                .flat_map(|p| &p.jobs)
            {
                assert!(measured.contains(&job.task.unwrap()), "{job:?}");
            }
            // Only the first phase may be a ladder measured for fingerprints.
            for (i, p) in slice.phases.iter().enumerate() {
                assert!(p.recorded || (i == 0 && p.phase == Phase::Ladder));
            }
            seen.extend(mine);
        }
        let mut sorted = seen.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), seen.len(), "disjoint over {count} shards");
        let mut whole_sorted = all.clone();
        whole_sorted.sort();
        assert_eq!(sorted, whole_sorted, "covering over {count} shards");
    }
    // The same slice on every call (no clock, order or machine in it).
    let a = whole
        .clone()
        .shard(&tasks, shard::Shard::new(2, 3).unwrap());
    let b = campaign_plan(&tasks).shard(&tasks, shard::Shard::new(2, 3).unwrap());
    assert_eq!(a.recorded_keys(), b.recorded_keys());
}
