//! A standalone sandbox helper, for running the sandbox library without the
//! `pdl-swe` binary (its own tests use it): `pdl-sandbox-init SPEC_FILE`.

fn main() {
    let Some(spec) = std::env::args_os().nth(1) else {
        eprintln!("usage: pdl-sandbox-init SPEC_FILE");
        std::process::exit(2);
    };
    pdl_sandbox::init_main(std::path::Path::new(&spec));
}
