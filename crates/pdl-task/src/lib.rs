//! The PDL-SWE-Bench task model.
//!
//! A task version is an [`InstanceRow`] (the eighteen dataset columns) plus
//! [`TaskExtras`] (the ladder's diffs and registered rewards, limits), together a
//! [`Task`]. Tasks live in three interchangeable forms, converted losslessly:
//!
//! - the task tree ([`tree`]): `manifest.yaml`, `fixtures/`, `hidden/`,
//!   `solution/gold.diff`, `ladder/<rung>`;
//! - JSONL ([`jsonl`]): one row per line;
//! - Parquet ([`parquet_io`]): the published schema.
//!
//! [`Dataset::load`] reads any of them and keeps every task that fails to load as
//! a [`LoadError`] naming the file, row and field, beside the tasks that loaded.
//!
//! ```
//! use pdl_task::RewardFormula;
//! let formula = RewardFormula::parse("0.80hidden_pass_fraction + 0.15*public_regression + 0.05*build_health").unwrap();
//! let inputs = pdl_task::RewardInputs::from_counts(0, 3, 6, 6, true);
//! assert_eq!(formula.evaluate(&inputs), 0.2);
//! ```

pub mod dataset;
pub mod diff;
pub mod error;
pub mod formula;
pub mod jsonl;
pub mod parquet_io;
pub mod row;
pub mod safe;
pub mod task;
pub mod tree;

pub use dataset::{write_dataset, Dataset, DatasetFormat};
pub use error::{LoadError, WriteError};
pub use formula::{Fraction, RewardFormula, RewardInputs, RewardVariable};
pub use row::{InstanceRow, RepoFile};
pub use task::{LadderRung, Limits, Task, TaskExtras};
