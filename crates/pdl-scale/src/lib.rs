//! Beyond one machine.
//!
//! `pdl-swe grade --shard I/N` and `pdl-swe run --shard I/N` run a
//! deterministic slice of the one pipeline's plan
//! ([`pdl_grader::pipeline::shard`]) and write a manifest beside their output.
//! This crate puts the slices back together and hands them to a scheduler:
//!
//! - [`merge`]: shard outputs (results files, or run folders) into one results
//!   file or run folder, the records in plan order, exactly what one machine
//!   would have written (timings and host details aside); missing shards,
//!   incomplete shards and conflicting duplicates are errors, exact duplicates
//!   are kept once with a warning.
//! - [`slurm`]: an `sbatch` job array (one array task per shard) and a
//!   dependent merge job, submitted with `sbatch --parsable`, and the status
//!   of a submission from `sacct` (or `scontrol`) and the shard outputs.
//!
//! Nothing here prints: commands render what these functions return.

pub mod merge;
pub mod slurm;

pub use merge::{comparable, MergeError, MergeKind, Merged};
pub use slurm::{SlurmError, SlurmJob, SlurmStatus, Submitted};
