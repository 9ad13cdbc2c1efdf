//! The bundled open suite: every task tree under the repository's `tasks/`
//! folder, embedded at build time, so the binary grades the suite on a machine
//! that has nothing but the binary. [`bundled`] loads it as a [`Dataset`].

use pdl_task::tree::TreeFiles;
use pdl_task::Dataset;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/suite.rs"));
}

/// How the bundled suite names itself as a dataset source.
pub const SOURCE: &str = "bundled open suite";

/// The bundled suite's task trees as maps of relative path to bytes.
pub fn trees() -> Vec<(String, TreeFiles)> {
    embedded::TASK_TREES
        .iter()
        .map(|(name, files)| {
            let map = files
                .iter()
                .map(|(path, bytes)| (path.to_string(), bytes.to_vec()))
                .collect();
            (format!("tasks/{name}"), map)
        })
        .collect()
}

/// The certificates of the bundled tasks (the files of each task's
/// `certificates/` folder), as `(task folder name, file name, bytes)`.
pub fn certificates() -> Vec<(String, String, Vec<u8>)> {
    embedded::CERTIFICATES
        .iter()
        .flat_map(|(task, files)| {
            files
                .iter()
                .map(move |(name, bytes)| (task.to_string(), name.to_string(), bytes.to_vec()))
        })
        .collect()
}

/// Loads the bundled suite.
pub fn bundled() -> Dataset {
    let trees = trees();
    Dataset::from_trees(
        SOURCE,
        trees.iter().map(|(name, files)| (name.clone(), files)),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_bundled_task_loads() {
        let dataset = super::bundled();
        assert!(dataset.errors.is_empty(), "{:#?}", dataset.errors);
        assert!(!dataset.tasks.is_empty());
    }

    /// A task that moves between tiers (a measurement can move it) must leave
    /// the suite with the card's mix, or another task must move the other way.
    #[test]
    fn the_suite_keeps_the_tier_mix_of_the_card() {
        let dataset = super::bundled();
        let count = |tier: &str| dataset.tasks.iter().filter(|t| t.row.tier == tier).count();
        let mix: Vec<usize> = ["T1", "T2", "T3", "T4", "T5"].map(count).to_vec();
        assert_eq!(dataset.tasks.len(), 18);
        assert_eq!(mix, [1, 2, 10, 2, 3], "tasks per tier, T1 to T5");
    }
}
