//! Ctrl-C and SIGTERM during `validate`, `calibrate`, `grade` and `run`.
//!
//! The first signal asks every run to stop ([`pdl_sandbox::interrupt`]): the
//! running sandboxes are killed (their process groups, and with them their
//! namespaces and cgroups), no further grading starts, and results of runs
//! the signal cut short are not recorded. The command then returns and exits
//! with [`crate::exit::INTERRUPTED`], leaving every record written before the
//! signal in place (a later run resumes from them). A second signal, or a
//! command still busy [`GRACE`] after the first, exits at once with the same
//! code.

use std::time::{Duration, Instant};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// How long a command may take to wind down after the first signal.
pub const GRACE: Duration = Duration::from_secs(20);

/// Installs the handlers (a thread that waits for the signals).
pub fn install() -> std::io::Result<()> {
    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut first: Option<Instant> = None;
            loop {
                for signal in signals.pending() {
                    pdl_sandbox::interrupt::request();
                    if first.is_some() {
                        eprintln!("\nsecond signal: exiting now");
                        pdl_sandbox::scratch::detach_all();
                        std::process::exit(crate::exit::INTERRUPTED);
                    }
                    let name = if signal == SIGINT { "SIGINT" } else { "SIGTERM" };
                    eprintln!("\n{name}: stopping the running sandboxes; the records written so far are kept");
                    first = Some(Instant::now());
                }
                if first.is_some_and(|t| t.elapsed() > GRACE) {
                    pdl_sandbox::interrupt::request();
                    eprintln!("still busy {} s after the signal: exiting now", GRACE.as_secs());
                    pdl_sandbox::scratch::detach_all();
                    std::process::exit(crate::exit::INTERRUPTED);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })?;
    Ok(())
}

/// The error a command returns when it stopped because of a signal.
pub fn stopped(what: &str) -> crate::exit::ExitError {
    crate::exit::ExitError {
        code: crate::exit::INTERRUPTED,
        error: anyhow::anyhow!("interrupted: {what}"),
    }
}

/// True once a signal asked the command to stop.
pub fn requested() -> bool {
    pdl_sandbox::interrupt::requested()
}
