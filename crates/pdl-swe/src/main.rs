//! The `pdl-swe` binary: arguments in, library calls, exit code out.

mod cli;
mod commands;
mod exit;
mod render;
mod settings;

use clap::Parser;

fn main() {
    let cli = cli::Cli::parse();
    let result = match &cli.command {
        cli::Command::Tasks(cmd) => commands::tasks::run(cmd),
        cli::Command::Validate(args) => commands::validate::run(args),
        cli::Command::Calibrate(args) => commands::calibrate::run(args),
        cli::Command::Grade(args) => commands::grade::run(args),
        cli::Command::SandboxInit { .. } => Ok(exit::USAGE),
    };
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {:#}", e.error);
            e.code
        }
    };
    std::process::exit(code);
}
