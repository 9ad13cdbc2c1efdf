//! Reading a run folder: `campaign.json` (optional) and `results.jsonl`.
//!
//! Only an unreadable folder or file is fatal. A malformed line becomes a
//! [`Warning`] naming the file and line; a torn last line (no final newline and
//! not valid JSON, as a killed run leaves it) is ignored.

use std::path::Path;

use pdl_grader::ResultRecord;
use serde_json::Value;

use crate::error::{ReportError, ReportErrorKind, Warning};

/// The campaign description file in a run folder.
pub const CAMPAIGN_FILE: &str = "campaign.json";

/// The result records file in a run folder.
pub const RESULTS_FILE: &str = "results.jsonl";

/// A record and the one-based line it came from.
#[derive(Debug, Clone)]
pub(crate) struct LineRecord {
    pub line: Option<usize>,
    pub record: ResultRecord,
}

/// What reading a run folder produced.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub campaign: Option<Value>,
    pub records: Vec<LineRecord>,
    pub warnings: Vec<Warning>,
    /// Non-blank lines in `results.jsonl`.
    pub lines: usize,
    /// Lines that could not be read as a record.
    pub malformed: usize,
    /// The one-based number of a torn last line that was ignored.
    pub torn_line: Option<usize>,
}

/// Reads `campaign.json` and `results.jsonl` from `run_dir`.
pub(crate) fn read_run_dir(run_dir: &Path) -> Result<Loaded, ReportError> {
    let meta = std::fs::metadata(run_dir)
        .map_err(|e| ReportError::new(run_dir, ReportErrorKind::Read(e)))?;
    if !meta.is_dir() {
        return Err(ReportError::new(
            run_dir,
            ReportErrorKind::Read(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                "not a directory",
            )),
        ));
    }
    let dir = pdl_fs::Dir::open(run_dir)
        .map_err(|e| ReportError::new(run_dir, ReportErrorKind::Read(e.into())))?;
    let campaign_bytes = read_optional(&dir, CAMPAIGN_FILE, MAX_CAMPAIGN_BYTES)?;
    let results_bytes = read_optional(&dir, RESULTS_FILE, MAX_RESULTS_BYTES)?;
    if campaign_bytes.is_none() && results_bytes.is_none() {
        return Err(ReportError::new(run_dir, ReportErrorKind::NotARunFolder));
    }

    let mut loaded = Loaded::default();
    if let Some(bytes) = campaign_bytes {
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v @ Value::Object(_)) => loaded.campaign = Some(v),
            Ok(_) => loaded.warnings.push(Warning::new(
                CAMPAIGN_FILE,
                None,
                "not a JSON object; campaign inferred from the records",
            )),
            Err(e) => loaded.warnings.push(Warning::new(
                CAMPAIGN_FILE,
                Some(e.line()),
                format!("invalid JSON ({e}); campaign inferred from the records"),
            )),
        }
    }
    match results_bytes {
        Some(bytes) => parse_results(&bytes, &mut loaded),
        None => loaded.warnings.push(Warning::new(
            RESULTS_FILE,
            None,
            "missing: no results recorded yet",
        )),
    }
    Ok(loaded)
}

/// The largest `campaign.json` read.
const MAX_CAMPAIGN_BYTES: u64 = 16 << 20;

/// The largest `results.jsonl` read.
const MAX_RESULTS_BYTES: u64 = 4 << 30;

/// Reads a file of the run folder without following a link; a missing file is
/// `None`, a link or anything but a regular file is an error naming it.
fn read_optional(
    dir: &pdl_fs::Dir,
    name: &str,
    limit: u64,
) -> Result<Option<Vec<u8>>, ReportError> {
    dir.read(Path::new(name), limit).map_err(|e| {
        ReportError::new(
            dir.display_path(Path::new(name)),
            ReportErrorKind::Read(e.into()),
        )
    })
}

/// Parses the lines of `results.jsonl` into `loaded`.
pub(crate) fn parse_results(bytes: &[u8], loaded: &mut Loaded) {
    let ends_with_newline = bytes.ends_with(b"\n");
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    // `split` yields an empty piece after a final newline; the last piece is the
    // unterminated tail otherwise.
    let last = lines.len() - 1;
    for (index, raw) in lines.iter().enumerate() {
        let number = index + 1;
        let text = String::from_utf8_lossy(raw);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        loaded.lines += 1;
        let torn_candidate = index == last && !ends_with_newline;
        let parsed = std::str::from_utf8(raw)
            .map_err(|e| format!("not UTF-8 ({e})"))
            .and_then(|s| {
                serde_json::from_str::<ResultRecord>(s).map_err(|e| describe_json_error(s, &e))
            });
        match parsed {
            Ok(record) => loaded.records.push(LineRecord {
                line: Some(number),
                record,
            }),
            Err(_) if torn_candidate && serde_json::from_slice::<Value>(raw).is_err() => {
                loaded.torn_line = Some(number);
            }
            Err(message) => {
                loaded.malformed += 1;
                loaded.warnings.push(Warning::new(
                    RESULTS_FILE,
                    Some(number),
                    format!("skipped malformed record: {message}"),
                ));
            }
        }
    }
}

/// A short description of why a line is not a record.
fn describe_json_error(line: &str, err: &serde_json::Error) -> String {
    match serde_json::from_str::<Value>(line) {
        Err(_) => format!("invalid JSON ({err})"),
        Ok(Value::Object(_)) => format!("not a result record ({err})"),
        Ok(_) => "not a JSON object".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good_line(id: &str) -> String {
        serde_json::to_string(&crate::testutil::record(id, "gold", 1.0)).unwrap()
    }

    #[test]
    fn a_torn_last_line_is_ignored_without_a_warning() {
        let text = format!(
            "{}\n{}\n{{\"instance_id\": \"t",
            good_line("a"),
            good_line("b")
        );
        let mut loaded = Loaded::default();
        parse_results(text.as_bytes(), &mut loaded);
        assert_eq!(loaded.records.len(), 2);
        assert_eq!(loaded.torn_line, Some(3));
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        assert_eq!(loaded.malformed, 0);
    }

    #[test]
    fn an_unterminated_but_complete_last_line_is_kept() {
        let text = format!("{}\n{}", good_line("a"), good_line("b"));
        let mut loaded = Loaded::default();
        parse_results(text.as_bytes(), &mut loaded);
        assert_eq!(loaded.records.len(), 2);
        assert_eq!(loaded.records[1].line, Some(2));
        assert_eq!(loaded.torn_line, None);
    }

    #[test]
    fn a_malformed_line_becomes_a_warning_with_its_line() {
        let text = format!(
            "{}\n\nnot json at all\n{{\"instance_id\": \"x\"}}\n[1]\n{}\n",
            good_line("a"),
            good_line("b")
        );
        let mut loaded = Loaded::default();
        parse_results(text.as_bytes(), &mut loaded);
        assert_eq!(loaded.records.len(), 2);
        assert_eq!(loaded.records[1].line, Some(6));
        assert_eq!(loaded.malformed, 3);
        let lines: Vec<_> = loaded.warnings.iter().map(|w| w.line).collect();
        assert_eq!(lines, vec![Some(3), Some(4), Some(5)]);
        let text = loaded.warnings[0].to_string();
        assert!(text.starts_with("results.jsonl:3: skipped malformed record: invalid JSON"));
        assert!(loaded.warnings[1].message.contains("not a result record"));
        assert!(loaded.warnings[2].message.contains("not a JSON object"));
    }

    #[test]
    fn a_malformed_last_line_with_a_newline_is_a_warning_not_a_tear() {
        let text = format!("{}\n{{\"instance_id\": \n", good_line("a"));
        let mut loaded = Loaded::default();
        parse_results(text.as_bytes(), &mut loaded);
        assert_eq!(loaded.torn_line, None);
        assert_eq!(loaded.malformed, 1);
        assert_eq!(loaded.warnings[0].line, Some(2));
    }

    #[test]
    fn invalid_utf8_is_a_warning() {
        let mut bytes = good_line("a").into_bytes();
        bytes.extend_from_slice(b"\n\xff\xfe\n");
        let mut loaded = Loaded::default();
        parse_results(&bytes, &mut loaded);
        assert_eq!(loaded.records.len(), 1);
        assert!(loaded.warnings[0].message.contains("not UTF-8"));
    }

    #[test]
    fn an_empty_folder_is_not_a_run_folder() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_run_dir(dir.path()).unwrap_err();
        assert!(matches!(err.kind, ReportErrorKind::NotARunFolder));
        assert!(err.to_string().contains("not a run folder"), "{err}");
        let missing = dir.path().join("nope");
        let err = read_run_dir(&missing).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn a_broken_campaign_file_is_a_warning_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CAMPAIGN_FILE), "{\n  \"model\": ,\n}").unwrap();
        let loaded = read_run_dir(dir.path()).unwrap();
        assert!(loaded.campaign.is_none());
        let w: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
        assert!(w[0].starts_with("campaign.json:2: invalid JSON"), "{w:?}");
        assert!(w[1].starts_with("results.jsonl: missing"), "{w:?}");
    }
}
