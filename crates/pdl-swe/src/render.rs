//! Rendering for people: progress bars and tables. Everything the libraries
//! return is rendered here or written as JSON.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress_bar(total: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner:.green} {prefix} [{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// A table with the house style.
pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    t
}

/// A reward with three decimals, or a dash.
pub fn reward(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_string(), |r| format!("{r:.3}"))
}

/// Prints a value as pretty JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Appends JSON lines to a file, flushing after each, so that every result is on
/// disk as soon as it is known.
pub struct JsonlAppender {
    path: PathBuf,
    file: File,
}

impl JsonlAppender {
    /// Opens `path` for appending, creating it; a torn last line (from a killed
    /// run) is cut off first.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let mut content = Vec::new();
        file.read_to_end(&mut content)?;
        if !content.is_empty() && !content.ends_with(b"\n") {
            let keep = content
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
            file.set_len(keep as u64)?;
            file.seek(SeekFrom::End(0))?;
        }
        Ok(JsonlAppender {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Appends one value as a line.
    pub fn append<T: Serialize>(&mut self, value: &T) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(value)?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|_| self.file.flush())
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

/// Reads the complete JSON lines of a file that parse as `T`; others are skipped.
pub fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> Vec<T> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
