//! Running a list of jobs in parallel ([`execute`]): workers pull jobs in order;
//! every result is handed to the caller's thread as soon as it is known, so the
//! caller can write it out and show progress at once.
//!
//! Once the harness is asked to stop ([`pdl_sandbox::interrupt`]), no further
//! job starts and results that arrive afterwards are dropped: they may come
//! from runs the interruption cut short, and must not be recorded as real.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

/// Runs `work` over `jobs` on `parallelism` threads. `on_result` runs on the
/// calling thread, once per job, in completion order, with the job's index;
/// after an interruption it is not called again (see the module docs).
pub fn execute<J, R, W, F>(jobs: &[J], parallelism: usize, work: W, mut on_result: F)
where
    J: Sync,
    R: Send,
    W: Fn(&J) -> R + Sync,
    F: FnMut(usize, R),
{
    execute_reporting(jobs, parallelism, work, |report| {
        if let Report::Finished(i, r) = report {
            on_result(i, r);
        }
    });
}

/// What [`execute_reporting`] tells the calling thread.
#[derive(Debug)]
pub enum Report<R> {
    /// The job with this index started on a worker.
    Started(usize),
    /// The job with this index finished with this result.
    Finished(usize, R),
}

/// [`execute`], and the caller also hears when each job starts on a worker
/// (always before its result; nothing after an interruption).
pub fn execute_reporting<J, R, W, F>(jobs: &[J], parallelism: usize, work: W, mut on_report: F)
where
    J: Sync,
    R: Send,
    W: Fn(&J) -> R + Sync,
    F: FnMut(Report<R>),
{
    let next = AtomicUsize::new(0);
    let workers = parallelism.max(1).min(jobs.len().max(1));
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel();
        for _ in 0..workers {
            let tx = tx.clone();
            let next = &next;
            let work = &work;
            scope.spawn(move || loop {
                if pdl_sandbox::interrupt::requested() {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= jobs.len() {
                    break;
                }
                if tx.send(Report::Started(i)).is_err() {
                    break;
                }
                let result = work(&jobs[i]);
                if tx.send(Report::Finished(i, result)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for report in rx {
            if pdl_sandbox::interrupt::requested() {
                continue;
            }
            on_report(report);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_runs_once_and_reports_on_the_caller_thread() {
        let jobs: Vec<u32> = (0..50).collect();
        let caller = std::thread::current().id();
        let mut seen = [0; 50];
        execute(
            &jobs,
            4,
            |j| j * 2,
            |i, r| {
                assert_eq!(std::thread::current().id(), caller);
                assert_eq!(r, jobs[i] * 2);
                seen[i] += 1;
            },
        );
        assert!(seen.iter().all(|&n| n == 1));
    }

    #[test]
    fn every_job_is_reported_started_before_it_finishes() {
        let jobs: Vec<u32> = (0..20).collect();
        let mut started = [false; 20];
        let mut finished = 0;
        execute_reporting(
            &jobs,
            3,
            |j| *j,
            |report| match report {
                Report::Started(i) => {
                    assert!(!started[i]);
                    started[i] = true;
                }
                Report::Finished(i, _) => {
                    assert!(started[i], "job {i} finished before it started");
                    finished += 1;
                }
            },
        );
        assert_eq!(finished, 20);
    }

    #[test]
    fn no_jobs_is_fine() {
        let jobs: Vec<u32> = vec![];
        execute(&jobs, 4, |j| *j, |_, _: u32| panic!("no results expected"));
    }
}
