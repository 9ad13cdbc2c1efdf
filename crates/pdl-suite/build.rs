//! Embeds every task tree under the repository's `tasks/` folder, and apart
//! from them each task's `certificates/` (not part of the task).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn is_junk(name: &str) -> bool {
    name == "__pycache__"
        || name == ".pytest_cache"
        || name == ".DS_Store"
        || name.ends_with(".pyc")
}

/// A task's certificates folder (see `pdl_task::tree::CERTIFICATES_DIR`).
const CERTIFICATES: &str = "certificates/";

/// A task's reviews folder (see `pdl_task::tree::REVIEWS_DIR`): not embedded.
const REVIEWS: &str = "reviews/";

fn collect(dir: &Path, base: &Path, out: &mut Vec<(String, PathBuf)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("readable entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if is_junk(&name) {
            continue;
        }
        if path.is_dir() {
            collect(&path, base, out);
        } else {
            let rel = path
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.push((rel, path));
        }
    }
}

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let tasks_dir = manifest_dir.join("../../tasks");
    println!("cargo:rerun-if-changed={}", tasks_dir.display());
    let mut code = String::from("/// One file of a task tree: (relative path, bytes).\npub type TreeFile = (&'static str, &'static [u8]);\n/// Every bundled task tree: (folder name, files).\npub static TASK_TREES: &[(&str, &[TreeFile])] = &[\n");
    let mut certificates = String::from("/// Every bundled task's certificates: (folder name, files of `certificates/`).\npub static CERTIFICATES: &[(&str, &[TreeFile])] = &[\n");
    if tasks_dir.is_dir() {
        let mut dirs: Vec<_> = std::fs::read_dir(&tasks_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("manifest.yaml").is_file())
            .collect();
        dirs.sort();
        for dir in dirs {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let mut files = Vec::new();
            collect(&dir, &dir, &mut files);
            files.retain(|(rel, _)| !rel.starts_with(REVIEWS));
            let (certs, files): (Vec<_>, Vec<_>) = files
                .into_iter()
                .partition(|(rel, _)| rel.starts_with(CERTIFICATES));
            if !certs.is_empty() {
                writeln!(certificates, "    ({name:?}, &[").unwrap();
                for (rel, path) in certs {
                    let abs = path.canonicalize().unwrap();
                    writeln!(
                        certificates,
                        "        ({:?}, include_bytes!({:?})),",
                        &rel[CERTIFICATES.len()..],
                        abs.display().to_string()
                    )
                    .unwrap();
                }
                certificates.push_str("    ]),\n");
            }
            writeln!(code, "    ({name:?}, &[").unwrap();
            for (rel, path) in files {
                let abs = path.canonicalize().unwrap();
                writeln!(
                    code,
                    "        ({rel:?}, include_bytes!({:?})),",
                    abs.display().to_string()
                )
                .unwrap();
            }
            code.push_str("    ]),\n");
        }
    }
    code.push_str("];\n");
    certificates.push_str("];\n");
    code.push_str(&certificates);
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("suite.rs");
    std::fs::write(out, code).unwrap();
}
