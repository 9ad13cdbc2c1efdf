//! Property tests: any task survives tree → JSONL → Parquet → tree unchanged.

use pdl_task::jsonl::{parse_jsonl, task_to_line};
use pdl_task::parquet_io::{parquet_bytes, parse_parquet};
use pdl_task::task::{render_test_patch, HiddenFile};
use pdl_task::tree::{task_from_tree, task_to_tree};
use pdl_task::{InstanceRow, LadderRung, Limits, RepoFile, Task, TaskExtras};
use proptest::collection::{btree_set, vec};
use proptest::prelude::*;

fn segment() -> impl Strategy<Value = String> {
    "[a-z_][a-z0-9_.-]{0,8}".prop_filter("no dot segments", |s| s != "." && s != "..")
}

fn path() -> impl Strategy<Value = String> {
    vec(segment(), 1..4).prop_map(|parts| parts.join("/"))
}

/// Text with the characters that break naive serializers: unicode, CR, tabs,
/// quotes, YAML indicators, leading and trailing spaces, no final newline.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,60}",
        "[ \t\r\n#:'\"|>-]{0,12}[a-zé中\\-]{0,10}\n?",
        Just(String::new()),
        Just("line one\r\nline two\r\n".to_string()),
        Just("  indented\n\ttabbed\n  ".to_string()),
    ]
}

fn unique_paths(n: std::ops::Range<usize>) -> impl Strategy<Value = Vec<String>> {
    btree_set(path(), n)
        .prop_map(|s| s.into_iter().collect::<Vec<_>>())
        .prop_filter("no path is a prefix folder of another", |paths| {
            !paths
                .iter()
                .any(|a| paths.iter().any(|b| b.starts_with(&format!("{a}/"))))
        })
}

prop_compose! {
    fn task()(
        id in "[a-z]{1,10}",
        version in 1i64..1000,
        tier in prop_oneof![Just("T1"), Just("T3"), Just("T5")],
        domain in text(),
        problem in text(),
        patch in text(),
        files in unique_paths(1..5).prop_flat_map(|paths| {
            let n = paths.len();
            (Just(paths), vec(text(), n))
        }),
        hidden in unique_paths(1..3).prop_flat_map(|paths| {
            let n = paths.len();
            (Just(paths), vec(text(), n))
        }),
        f2p in vec("[a-z/._:\\[\\]-]{1,30}", 1..4),
        p2p in vec("[a-z/._:]{1,30}", 0..4),
        allowed in vec("[a-z*/]{1,8}", 0..3),
        forbidden in vec("[a-z*/.]{1,8}", 0..3),
        budget in 1i64..10_000_000,
        rungs in btree_set("[a-z][a-z_]{0,7}\\.diff", 0..3).prop_flat_map(|names| {
            let n = names.len();
            (Just(names.into_iter().collect::<Vec<_>>()), vec((0.0f64..1.0, text(), text()), n))
        }),
        timeout in proptest::option::of(1u64..1000),
    ) -> Task {
        let files: Vec<RepoFile> = files.0.into_iter().zip(files.1).map(|(path, content)| RepoFile { path, content }).collect();
        let hidden: Vec<HiddenFile> = hidden.0.into_iter().zip(hidden.1).map(|(relative_path, content)| HiddenFile { relative_path, content }).collect();
        let ladder: Vec<LadderRung> = rungs.0.iter().zip(rungs.1).map(|(name, (reward, note, diff))| LadderRung { name: name.clone(), reward, note, diff }).collect();
        Task {
            row: InstanceRow {
                instance_id: format!("{id}-v{version}"),
                task_id: id,
                task_version: version,
                tier: tier.to_string(),
                domain,
                problem_statement: problem,
                patch,
                test_patch: render_test_patch(&hidden),
                hidden_test_count: f2p.len() as i64,
                public_test_count: p2p.len() as i64,
                fail_to_pass: f2p,
                pass_to_pass: p2p,
                files,
                patch_policy_allowed: allowed,
                patch_policy_forbidden: forbidden,
                token_budget: budget,
                graded_ladder_rungs: rungs.0.clone(),
                reward_formula: "0.80*hidden_pass_fraction + 0.15*public_regression + 0.05*build_health".into(),
            },
            extras: TaskExtras { ladder, limits: Limits { test_timeout_s: timeout }, manifest_yaml: None },
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn tree_jsonl_parquet_tree_reproduces_every_byte(tasks in vec(task(), 1..4)) {
        for t in &tasks {
            let tree = task_to_tree(t).unwrap();
            let from_tree = task_from_tree(&tree, "prop").unwrap();
            prop_assert_eq!(&from_tree, t);
            let (from_jsonl, errors) = parse_jsonl(&task_to_line(&from_tree), "prop.jsonl");
            prop_assert!(errors.is_empty(), "{:?}", errors);
            prop_assert_eq!(&from_jsonl[0], t);
        }
        let mut unique = tasks.clone();
        unique.dedup_by(|a, b| a.row.instance_id == b.row.instance_id);
        let parsed = parse_parquet(parquet_bytes(&unique).unwrap(), "prop.parquet");
        prop_assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
        let from_parquet = parsed.tasks;
        prop_assert_eq!(&from_parquet, &unique);
        for (back, original) in from_parquet.iter().zip(&unique) {
            prop_assert_eq!(task_to_tree(back).unwrap(), task_to_tree(original).unwrap());
        }
    }
}
