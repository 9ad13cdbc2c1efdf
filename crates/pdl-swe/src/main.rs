//! The `pdl-swe` binary: arguments in, library calls, exit code out.

mod cli;
mod commands;
mod exit;
mod interrupt;
mod progress;
mod render;
mod settings;

use clap::Parser;

fn main() {
    // The sandbox helper must start before anything else (it needs a
    // single-threaded process), so it is routed here, ahead of argument parsing.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == pdl_sandbox::INIT_SUBCOMMAND)
    {
        pdl_sandbox::init_main();
    }
    let cli = cli::Cli::parse();
    let runs_sandboxes = matches!(
        &cli.command,
        cli::Command::Validate(_)
            | cli::Command::Calibrate(_)
            | cli::Command::Grade(_)
            | cli::Command::Run(_)
            | cli::Command::Serve(_)
    );
    if runs_sandboxes {
        if let Err(e) = interrupt::install() {
            eprintln!("error: cannot handle Ctrl-C and SIGTERM: {e}");
            std::process::exit(exit::ENVIRONMENT);
        }
    }
    let result = match &cli.command {
        cli::Command::Tasks(cmd) => commands::tasks::run(cmd),
        cli::Command::Validate(args) => commands::validate::run(args),
        cli::Command::Calibrate(args) => commands::calibrate::run(args),
        cli::Command::Grade(args) => commands::grade::run(args),
        cli::Command::Certify(args) => commands::certify::run(args),
        cli::Command::Doctor(args) => commands::doctor::run(args),
        cli::Command::Merge(args) => commands::merge::run(args),
        cli::Command::Slurm(cmd) => commands::slurm::run(cmd),
        cli::Command::Run(args) => commands::run::run(args),
        cli::Command::Report(args) => commands::report::run(args),
        cli::Command::Model(cmd) => commands::model::run(cmd),
        cli::Command::Serve(args) => commands::service::serve(args),
        cli::Command::Datasets(cmd) => commands::service::datasets(cmd),
        cli::Command::Submit(args) => commands::service::submit(args),
        cli::Command::Runs(cmd) => commands::service::runs(cmd),
        cli::Command::SandboxInit => Ok(exit::USAGE),
    };
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!(
                "error: {}",
                pdl_report::terminal_safe(&format!("{:#}", e.error))
            );
            e.code
        }
    };
    std::process::exit(code);
}
