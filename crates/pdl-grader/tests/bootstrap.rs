//! The trusted bootstrap's own invariants, checked on its source with the
//! machine's Python: the generators that hold the run's key and checks look up
//! no global name (rebinding a builtin or a module attribute must not put
//! foreign code on their stack), and the file compiles.

use std::process::Command;

const CHECK: &str = r#"
import dis, importlib.util, sys, types
spec = importlib.util.spec_from_file_location("pdl_boot", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)

def walk(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from walk(const)

bad = []
for name in ("_vault", "_auditor", "_guardian", "_hidden_guard"):
    for code in walk(getattr(module, name).__code__):
        for ins in dis.get_instructions(code):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "IMPORT_NAME", "DELETE_GLOBAL"):
                bad.append("%s/%s: %s %s" % (name, code.co_name, ins.opname, ins.argval))
print("\n".join(bad) if bad else "CLEAN")
"#;

#[test]
fn the_guarded_generators_look_up_no_global_name() {
    let python = pdl_grader::find_interpreter(None).expect("a Python 3 interpreter");
    let boot = concat!(env!("CARGO_MANIFEST_DIR"), "/src/plugin/pdl_boot.py");
    let out = Command::new(&python.executable)
        .args(["-I", "-c", CHECK, boot])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text.trim(),
        "CLEAN",
        "global lookups in guarded code:\n{text}"
    );
}
