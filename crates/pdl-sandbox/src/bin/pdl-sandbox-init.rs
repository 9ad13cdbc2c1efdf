//! A standalone sandbox helper, for running the sandbox library without the
//! `pdl-swe` binary (its own tests use it): `pdl-sandbox-init` (the spec arrives
//! on descriptor 4).

fn main() {
    pdl_sandbox::init_main();
}
