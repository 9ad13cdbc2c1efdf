//! Unified diffs ([`PatchSet`]): split into per-file sections, with the paths,
//! modes and kind of change each section makes.
//!
//! The parser understands `diff --git` headers (renames, copies, modes, binary
//! patches, quoted paths) and plain `---`/`+++` headers, and walks hunks by their
//! line counts so that a removed line beginning with `-- ` is never taken for a
//! header. It does not apply patches: the grader hands sections to `git apply`.

use std::fmt;

/// What a file section does to its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// Creates a file.
    Added,
    /// Deletes a file.
    Deleted,
    /// Changes a file's content or mode in place.
    Modified,
    /// Moves a file (possibly with content changes).
    Renamed,
    /// Copies a file (possibly with content changes).
    Copied,
}

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    /// Unchanged line (text without the leading space).
    Context(String),
    /// Removed line.
    Removed(String),
    /// Added line.
    Added(String),
    /// `\ No newline at end of file`, applying to the line before.
    NoNewline,
}

/// One `@@` hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// Old start line.
    pub old_start: u64,
    /// Old line count.
    pub old_count: u64,
    /// New start line.
    pub new_start: u64,
    /// New line count.
    pub new_count: u64,
    /// The lines.
    pub lines: Vec<HunkLine>,
}

/// One file's part of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    /// Path before the change (prefix stripped), `None` for a created file.
    pub old_path: Option<String>,
    /// Path after the change (prefix stripped), `None` for a deleted file.
    pub new_path: Option<String>,
    /// What the section does.
    pub kind: ChangeKind,
    /// Mode before, when the header names it (e.g. `100644`).
    pub old_mode: Option<String>,
    /// Mode after, when the header names it.
    pub new_mode: Option<String>,
    /// A `GIT binary patch` or `Binary files … differ` section.
    pub binary: bool,
    /// The hunks, in order.
    pub hunks: Vec<Hunk>,
    /// The section's raw text, exactly as it appeared in the patch.
    pub raw: String,
}

impl FilePatch {
    /// Every path the section touches (both sides of a rename).
    pub fn touched_paths(&self) -> Vec<&str> {
        let mut paths = Vec::new();
        if let Some(p) = &self.old_path {
            paths.push(p.as_str());
        }
        if let Some(p) = &self.new_path {
            if Some(p) != self.old_path.as_ref() {
                paths.push(p.as_str());
            }
        }
        paths
    }

    /// True when either side of the section is a symbolic link or a gitlink
    /// (modes are read as octal numbers, as git reads them: `0120000` is a link).
    pub fn involves_symlink(&self) -> bool {
        [&self.old_mode, &self.new_mode].into_iter().any(|m| {
            m.as_deref()
                .and_then(parse_mode)
                .is_some_and(|mode| matches!(mode & MODE_TYPE, MODE_SYMLINK | MODE_GITLINK))
        })
    }

    /// The content a created file will have, from its hunks. `None` for other kinds
    /// of change and for binary sections.
    pub fn added_content(&self) -> Option<String> {
        if self.kind != ChangeKind::Added || self.binary {
            return None;
        }
        let mut out = String::new();
        for hunk in &self.hunks {
            for line in &hunk.lines {
                match line {
                    HunkLine::Added(text) | HunkLine::Context(text) => {
                        out.push_str(text);
                        out.push('\n');
                    }
                    HunkLine::NoNewline => {
                        if out.ends_with('\n') {
                            out.pop();
                        }
                    }
                    HunkLine::Removed(_) => {}
                }
            }
        }
        Some(out)
    }
}

/// The type bits of a git mode.
pub const MODE_TYPE: u32 = 0o170000;
/// A regular file.
pub const MODE_REGULAR: u32 = 0o100000;
/// A symbolic link.
pub const MODE_SYMLINK: u32 = 0o120000;
/// A gitlink (submodule).
pub const MODE_GITLINK: u32 = 0o160000;

/// A git mode read as git reads it: an octal number, leading zeros and
/// surrounding blanks allowed.
pub fn parse_mode(text: &str) -> Option<u32> {
    let text = text.trim();
    if text.is_empty() || text.len() > 12 {
        return None;
    }
    u32::from_str_radix(text, 8).ok()
}

/// Bounds the parser holds a patch to before anything applies it: a compressed
/// binary literal can expand far beyond its own size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchLimits {
    /// The largest size a `GIT binary patch` may declare for one file.
    pub max_binary_bytes: u64,
    /// The largest sum of the sizes binary sections declare.
    pub max_total_binary_bytes: u64,
}

impl Default for PatchLimits {
    fn default() -> Self {
        PatchLimits {
            max_binary_bytes: 16 << 20,
            max_total_binary_bytes: 64 << 20,
        }
    }
}

/// A parsed patch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PatchSet {
    /// The file sections, in order.
    pub files: Vec<FilePatch>,
    /// How many leading path components `git apply -p` must strip (1 for `a/` `b/`).
    pub strip: u8,
}

/// Why a patch could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct DiffError {
    /// One-based line number in the patch.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for DiffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// Undoes git's C-style quoting of a path (`"a/caf\303\251"`).
fn unquote(raw: &str) -> String {
    let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) else {
        return raw.to_string();
    };
    let mut bytes = Vec::new();
    let mut chars = inner.bytes().peekable();
    while let Some(b) = chars.next() {
        if b != b'\\' {
            bytes.push(b);
            continue;
        }
        match chars.next() {
            Some(b'n') => bytes.push(b'\n'),
            Some(b't') => bytes.push(b'\t'),
            Some(b'r') => bytes.push(b'\r'),
            Some(b'a') => bytes.push(7),
            Some(b'b') => bytes.push(8),
            Some(b'f') => bytes.push(12),
            Some(b'v') => bytes.push(11),
            Some(d @ b'0'..=b'7') => {
                let mut value = (d - b'0') as u32;
                for _ in 0..2 {
                    match chars.peek() {
                        Some(&n @ b'0'..=b'7') => {
                            value = value * 8 + (n - b'0') as u32;
                            chars.next();
                        }
                        _ => break,
                    }
                }
                bytes.push(value as u8);
            }
            Some(other) => bytes.push(other),
            None => bytes.push(b'\\'),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Takes one path token (quoted or not) off the front of `s`.
fn take_path_token(s: &str) -> (String, &str) {
    if let Some(rest) = s.strip_prefix('"') {
        let bytes = rest.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 2,
                b'"' => {
                    let token = &s[..i + 2];
                    return (unquote(token), s[i + 2..].trim_start());
                }
                _ => i += 1,
            }
        }
        (unquote(s), "")
    } else {
        (s.to_string(), "")
    }
}

/// Splits `a/x b/x` from a `diff --git` line. Unquoted paths with spaces are split
/// where the two halves name the same file.
fn split_git_header_paths(rest: &str) -> Option<(String, String)> {
    if rest.starts_with('"') {
        let (a, tail) = take_path_token(rest);
        let (b, _) = if tail.starts_with('"') {
            take_path_token(tail)
        } else {
            (tail.to_string(), "")
        };
        return Some((a, b));
    }
    // Unquoted: try every ` b/` split; prefer the one whose halves match.
    let candidates: Vec<usize> = rest.match_indices(" b/").map(|(i, _)| i).collect();
    for &i in &candidates {
        let (a, b) = (&rest[..i], &rest[i + 1..]);
        if a.strip_prefix("a/") == b.strip_prefix("b/") {
            return Some((a.to_string(), b.to_string()));
        }
    }
    if let Some(&i) = candidates.first() {
        return Some((rest[..i].to_string(), rest[i + 1..].to_string()));
    }
    let mut parts = rest.splitn(2, ' ');
    let a = parts.next()?.to_string();
    let b = parts.next()?.to_string();
    if b.contains('"') {
        let (bq, _) = take_path_token(&b);
        return Some((a, bq));
    }
    Some((a, b))
}

/// A path from a `---`/`+++` line: quoted or not, with any tab-separated timestamp
/// removed; `None` for `/dev/null`.
fn header_path(rest: &str) -> Option<String> {
    let rest = rest.trim_end_matches(['\r']);
    let path = if rest.starts_with('"') {
        take_path_token(rest).0
    } else {
        rest.split('\t').next().unwrap_or("").trim_end().to_string()
    };
    if path == "/dev/null" {
        None
    } else {
        Some(path)
    }
}

fn parse_hunk_header(line: &str) -> Option<(u64, u64, u64, u64)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let parse_range = |r: &str| -> Option<(u64, u64)> {
        match r.split_once(',') {
            Some((s, c)) => Some((s.parse().ok()?, c.parse().ok()?)),
            None => Some((r.parse().ok()?, 1)),
        }
    };
    let (os, oc) = parse_range(old)?;
    let (ns, nc) = parse_range(new)?;
    Some((os, oc, ns, nc))
}

fn strip_prefix_component(path: &str, prefix: &str) -> String {
    path.strip_prefix(prefix).unwrap_or(path).to_string()
}

struct SectionBuilder {
    start_line: usize,
    git: bool,
    git_paths: Option<(String, String)>,
    old_header: Option<Option<String>>,
    new_header: Option<Option<String>>,
    rename_from: Option<String>,
    rename_to: Option<String>,
    copy: bool,
    new_file: bool,
    deleted: bool,
    old_mode: Option<String>,
    new_mode: Option<String>,
    binary: bool,
    hunks: Vec<Hunk>,
    raw: String,
}

impl SectionBuilder {
    fn new(start_line: usize, git: bool) -> Self {
        SectionBuilder {
            start_line,
            git,
            git_paths: None,
            old_header: None,
            new_header: None,
            rename_from: None,
            rename_to: None,
            copy: false,
            new_file: false,
            deleted: false,
            old_mode: None,
            new_mode: None,
            binary: false,
            hunks: Vec::new(),
            raw: String::new(),
        }
    }

    /// Raw (unstripped) old and new paths.
    fn raw_paths(&self) -> (Option<String>, Option<String>) {
        let mut old = self.old_header.clone().flatten();
        let mut new = self.new_header.clone().flatten();
        if self.old_header.is_none() || self.new_header.is_none() {
            if let Some((a, b)) = &self.git_paths {
                if self.old_header.is_none() && !self.new_file {
                    old = Some(a.clone());
                }
                if self.new_header.is_none() && !self.deleted {
                    new = Some(b.clone());
                }
            }
        }
        if self.new_file {
            old = None;
        }
        if self.deleted {
            new = None;
        }
        (old, new)
    }
}

/// Parses a unified diff with the default [`PatchLimits`]. Text before the
/// first section (a commit message) is ignored. An empty or whitespace-only
/// patch parses to an empty set.
pub fn parse_patch(text: &str) -> Result<PatchSet, DiffError> {
    parse_patch_with(text, &PatchLimits::default())
}

/// The body of a `GIT binary patch` section, from the line after its header:
/// one or two `literal N`/`delta N` blocks of base85 lines, each ended by a
/// blank line. Anything else before the next section is refused, so that no
/// text can hide behind a binary section. Returns the index of the next line.
fn binary_body(
    lines: &[&str],
    mut i: usize,
    section: &mut SectionBuilder,
    limits: &PatchLimits,
    total: &mut u64,
) -> Result<usize, DiffError> {
    let error = |line: usize, reason: String| DiffError { line, reason };
    for block in 0..2 {
        let Some(header) = lines.get(i) else {
            if block == 0 {
                return Err(error(i, "a binary section without content".into()));
            }
            return Ok(i);
        };
        let head = header.trim_end_matches(['\n', '\r']);
        let is_delta = head.starts_with("delta ");
        let size = head
            .strip_prefix("literal ")
            .or_else(|| head.strip_prefix("delta "))
            .and_then(|n| n.trim().parse::<u64>().ok());
        let Some(size) = size else {
            if block == 1 && (head.starts_with("diff --git ") || head.trim().is_empty()) {
                return Ok(i);
            }
            return Err(error(i + 1, "text after a binary section".into()));
        };
        if size > limits.max_binary_bytes {
            return Err(error(
                i + 1,
                format!(
                    "a binary section declares {size} bytes, over the limit of {}",
                    limits.max_binary_bytes
                ),
            ));
        }
        *total += size;
        if *total > limits.max_total_binary_bytes {
            return Err(error(
                i + 1,
                format!(
                    "the binary sections declare {} bytes in all, over the limit of {}",
                    *total, limits.max_total_binary_bytes
                ),
            ));
        }
        section.raw.push_str(lines[i]);
        let block_line = i + 1;
        i += 1;
        // The start of a delta's compressed data, enough for its header.
        let mut delta_start: Vec<u8> = Vec::new();
        // base85 lines: a length character (A-Z, a-z) then 5-character groups.
        while let Some(line) = lines.get(i) {
            let body = line.trim_end_matches(['\n', '\r']);
            if body.is_empty() {
                section.raw.push_str(line);
                i += 1;
                break;
            }
            let first = body.as_bytes()[0];
            let well_formed = first.is_ascii_alphabetic()
                && (body.len() - 1) % 5 == 0
                && body[1..]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&()*+-;<=>?@^_`{|}~".contains(&b));
            if !well_formed {
                return Err(error(i + 1, "text after a binary section".into()));
            }
            if is_delta && delta_start.len() < DELTA_HEADER_INPUT {
                match base85_line(body) {
                    Some(bytes) => delta_start.extend_from_slice(&bytes),
                    None => return Err(error(i + 1, "a binary line that is not base85".into())),
                }
            }
            section.raw.push_str(line);
            i += 1;
        }
        if is_delta {
            // A delta's declared size is that of its instructions; the file it
            // makes has the size its own header gives, and that is what git
            // writes. It counts against the same bounds as a literal.
            let Some(result) = delta_result_size(&delta_start) else {
                return Err(error(
                    block_line,
                    "a binary delta without a readable header".into(),
                ));
            };
            if result > limits.max_binary_bytes {
                return Err(error(
                    block_line,
                    format!(
                        "a binary delta makes a file of {result} bytes, over the limit of {}",
                        limits.max_binary_bytes
                    ),
                ));
            }
            *total += result;
            if *total > limits.max_total_binary_bytes {
                return Err(error(
                    block_line,
                    format!(
                        "the binary sections make {} bytes in all, over the limit of {}",
                        *total, limits.max_total_binary_bytes
                    ),
                ));
            }
        }
    }
    // Nothing but blank lines may follow before the next section.
    while let Some(line) = lines.get(i) {
        if line.starts_with("diff --git ") {
            break;
        }
        if !line.trim().is_empty() {
            return Err(error(i + 1, "text after a binary section".into()));
        }
        section.raw.push_str(line);
        i += 1;
    }
    Ok(i)
}

/// Compressed bytes read from a delta to find its header: zlib's two header
/// bytes and a deflate block start hold the two varints many times over.
const DELTA_HEADER_INPUT: usize = 4096;

/// Decodes one line of git's base85: a length character (`A`-`Z` for 1-26
/// bytes, `a`-`z` for 27-52) and groups of five characters, four bytes each.
fn base85_line(line: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 85] =
        b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";
    let bytes = line.as_bytes();
    let len = match *bytes.first()? {
        c @ b'A'..=b'Z' => (c - b'A' + 1) as usize,
        c @ b'a'..=b'z' => (c - b'a' + 27) as usize,
        _ => return None,
    };
    let mut out = Vec::with_capacity(len + 4);
    for group in bytes[1..].chunks(5) {
        if group.len() != 5 {
            return None;
        }
        let mut value: u64 = 0;
        for c in group {
            let digit = ALPHABET.iter().position(|a| a == c)? as u64;
            value = value * 85 + digit;
        }
        let value = u32::try_from(value).ok()?;
        out.extend_from_slice(&value.to_be_bytes());
    }
    if out.len() < len {
        return None;
    }
    out.truncate(len);
    Some(out)
}

/// The size of the file a git binary delta makes: the second of the two
/// little-endian base-128 numbers that open its (zlib-compressed) data.
fn delta_result_size(compressed: &[u8]) -> Option<u64> {
    use miniz_oxide::inflate::core::{decompress, inflate_flags, DecompressorOxide};
    use miniz_oxide::inflate::TINFLStatus;
    let mut state = DecompressorOxide::new();
    let mut out = [0u8; 32];
    // Only the start of the data was read: more input may follow.
    let flags = inflate_flags::TINFL_FLAG_PARSE_ZLIB_HEADER
        | inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF
        | inflate_flags::TINFL_FLAG_HAS_MORE_INPUT;
    let (status, _, written) = decompress(&mut state, compressed, &mut out, 0, flags);
    if !matches!(
        status,
        TINFLStatus::Done | TINFLStatus::HasMoreOutput | TINFLStatus::NeedsMoreInput
    ) {
        return None;
    }
    let header = &out[..written];
    let mut numbers = [0u64; 2];
    let mut at = 0;
    for number in &mut numbers {
        let mut shift = 0;
        loop {
            let byte = *header.get(at)?;
            at += 1;
            *number |= u64::from(byte & 0x7f).checked_shl(shift)?;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
    }
    Some(numbers[1])
}

/// Parses a unified diff, holding it to `limits`.
pub fn parse_patch_with(text: &str, limits: &PatchLimits) -> Result<PatchSet, DiffError> {
    let mut binary_total = 0u64;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut sections: Vec<SectionBuilder> = Vec::new();
    let mut current: Option<SectionBuilder> = None;
    let mut i = 0;
    // Only the newline goes: a carriage return is content (CRLF files).
    let body = |l: &str| l.strip_suffix('\n').unwrap_or(l).to_string();
    while i < lines.len() {
        let line = lines[i];
        let content = body(line);
        if let Some(rest) = content.strip_prefix("diff --git ") {
            if let Some(done) = current.take() {
                sections.push(done);
            }
            let mut section = SectionBuilder::new(i + 1, true);
            section.git_paths = split_git_header_paths(rest);
            match &section.git_paths {
                None => {
                    return Err(DiffError {
                        line: i + 1,
                        reason: format!("cannot read the paths of `{content}`"),
                    })
                }
                // git strips the first component of these paths whatever it
                // is: a header without the a/ and b/ prefixes names other files
                // than it seems to.
                // (`git diff --no-index` writes `a/x a/x` for a deleted file.)
                Some((a, b))
                    if ![a, b]
                        .iter()
                        .all(|p| p.starts_with("a/") || p.starts_with("b/")) =>
                {
                    return Err(DiffError {
                        line: i + 1,
                        reason: format!(
                            "a `diff --git` header without the a/ and b/ prefixes: `{content}`"
                        ),
                    })
                }
                Some(_) => {}
            }
            section.raw.push_str(line);
            current = Some(section);
            i += 1;
            continue;
        }
        // A plain `---` header starts a section unless we are inside a git header
        // that has not seen its own `---` yet.
        let in_git_header = current
            .as_ref()
            .is_some_and(|s| s.git && s.old_header.is_none() && s.hunks.is_empty());
        if content.starts_with("--- ")
            && !in_git_header
            && i + 1 < lines.len()
            && lines[i + 1].starts_with("+++ ")
        {
            if let Some(done) = current.take() {
                sections.push(done);
            }
            current = Some(SectionBuilder::new(i + 1, false));
        }
        let Some(section) = current.as_mut() else {
            i += 1;
            continue;
        };
        if let Some(rest) = content.strip_prefix("--- ") {
            section.old_header = Some(header_path(rest));
            section.raw.push_str(line);
        } else if let Some(rest) = content.strip_prefix("+++ ") {
            section.new_header = Some(header_path(rest));
            section.raw.push_str(line);
        } else if content.starts_with("@@ ") {
            let (old_start, old_count, new_start, new_count) = parse_hunk_header(&content)
                .ok_or_else(|| DiffError {
                    line: i + 1,
                    reason: format!("malformed hunk header `{content}`"),
                })?;
            section.raw.push_str(line);
            let mut hunk = Hunk {
                old_start,
                old_count,
                new_start,
                new_count,
                lines: Vec::new(),
            };
            let (mut old_left, mut new_left) = (old_count, new_count);
            i += 1;
            while i < lines.len() && (old_left > 0 || new_left > 0) {
                let raw = lines[i];
                let l = body(raw);
                let first = l.chars().next();
                match first {
                    Some(' ') | None => {
                        if old_left == 0 || new_left == 0 {
                            return Err(DiffError {
                                line: i + 1,
                                reason: "hunk has more lines than its header counts".into(),
                            });
                        }
                        hunk.lines
                            .push(HunkLine::Context(l.get(1..).unwrap_or("").to_string()));
                        old_left -= 1;
                        new_left -= 1;
                    }
                    Some('-') => {
                        if old_left == 0 {
                            return Err(DiffError {
                                line: i + 1,
                                reason: "hunk removes more lines than its header counts".into(),
                            });
                        }
                        hunk.lines.push(HunkLine::Removed(l[1..].to_string()));
                        old_left -= 1;
                    }
                    Some('+') => {
                        if new_left == 0 {
                            return Err(DiffError {
                                line: i + 1,
                                reason: "hunk adds more lines than its header counts".into(),
                            });
                        }
                        hunk.lines.push(HunkLine::Added(l[1..].to_string()));
                        new_left -= 1;
                    }
                    Some('\\') => hunk.lines.push(HunkLine::NoNewline),
                    _ => {
                        return Err(DiffError {
                            line: i + 1,
                            reason: format!(
                                "hunk ends early: {old_left} old and {new_left} new lines missing"
                            ),
                        })
                    }
                }
                section.raw.push_str(raw);
                i += 1;
            }
            if old_left > 0 || new_left > 0 {
                return Err(DiffError {
                    line: i,
                    reason: "the patch ends inside a hunk (truncated?)".into(),
                });
            }
            if i < lines.len() && lines[i].starts_with('\\') {
                hunk.lines.push(HunkLine::NoNewline);
                section.raw.push_str(lines[i]);
                i += 1;
            }
            section.hunks.push(hunk);
            continue;
        } else if section.git && section.hunks.is_empty() && section.old_header.is_none() {
            section.raw.push_str(line);
            let mode = |m: &str| -> Result<String, DiffError> {
                match parse_mode(m) {
                    Some(v)
                        if matches!(v & MODE_TYPE, MODE_REGULAR | MODE_SYMLINK | MODE_GITLINK) =>
                    {
                        Ok(format!("{v:06o}"))
                    }
                    _ => Err(DiffError {
                        line: i + 1,
                        reason: format!("an unsupported file mode `{}`", m.trim()),
                    }),
                }
            };
            if let Some(m) = content.strip_prefix("new file mode ") {
                section.new_file = true;
                section.new_mode = Some(mode(m)?);
            } else if let Some(m) = content.strip_prefix("deleted file mode ") {
                section.deleted = true;
                section.old_mode = Some(mode(m)?);
            } else if let Some(m) = content.strip_prefix("old mode ") {
                section.old_mode = Some(mode(m)?);
            } else if let Some(m) = content.strip_prefix("new mode ") {
                section.new_mode = Some(mode(m)?);
            } else if let Some(p) = content.strip_prefix("rename from ") {
                section.rename_from = Some(unquote(p));
            } else if let Some(p) = content.strip_prefix("rename to ") {
                section.rename_to = Some(unquote(p));
            } else if let Some(p) = content.strip_prefix("copy from ") {
                section.copy = true;
                section.rename_from = Some(unquote(p));
            } else if let Some(p) = content.strip_prefix("copy to ") {
                section.copy = true;
                section.rename_to = Some(unquote(p));
            } else if content.starts_with("Binary files ") {
                // "Binary files a and b differ": no content; git refuses to
                // apply it, and nothing may follow in this section.
                section.binary = true;
                i += 1;
                if let Some(line) = lines.get(i).filter(|l| !l.starts_with("diff --git ")) {
                    if !line.trim().is_empty() {
                        return Err(DiffError {
                            line: i + 1,
                            reason: "text after a binary section".into(),
                        });
                    }
                }
                continue;
            } else if content.starts_with("GIT binary patch") {
                section.binary = true;
                i = binary_body(&lines, i + 1, section, limits, &mut binary_total)?;
                continue;
            } else if let Some(m) = content.strip_prefix("index ") {
                // `index abc..def 100644` carries the mode of an unchanged-mode file.
                if let Some(m) = m.split_whitespace().nth(1) {
                    let m = mode(m)?;
                    section.old_mode.get_or_insert_with(|| m.clone());
                    section.new_mode.get_or_insert(m);
                }
            }
        } else {
            // Trailing text between sections (e.g. a signature) belongs to no file.
            if section.hunks.is_empty() && !section.git {
                section.raw.push_str(line);
            }
        }
        i += 1;
    }
    if let Some(done) = current.take() {
        sections.push(done);
    }
    finish(sections)
}

fn finish(sections: Vec<SectionBuilder>) -> Result<PatchSet, DiffError> {
    // Decide the strip level: git sections always carry prefixes; plain ones do when
    // every named path starts with `a/` (old) or `b/` (new).
    let plain_prefixed = sections.iter().filter(|s| !s.git).all(|s| {
        let (old, new) = s.raw_paths();
        old.as_deref().is_none_or(|p| p.starts_with("a/"))
            && new.as_deref().is_none_or(|p| p.starts_with("b/"))
            && (old.is_some() || new.is_some())
    });
    let any_git = sections.iter().any(|s| s.git);
    let any_plain = sections.iter().any(|s| !s.git);
    if any_git && any_plain && !plain_prefixed {
        return Err(DiffError {
            line: sections.iter().find(|s| !s.git).map_or(1, |s| s.start_line),
            reason: "the patch mixes git-style and unprefixed plain sections".into(),
        });
    }
    let strip = if any_git || plain_prefixed { 1 } else { 0 };
    let mut files = Vec::new();
    for s in sections {
        let (old_raw, new_raw) = s.raw_paths();
        let (old_prefix, new_prefix) = if strip == 1 { ("a/", "b/") } else { ("", "") };
        let mut old_path = old_raw.map(|p| strip_prefix_component(&p, old_prefix));
        let mut new_path = new_raw.map(|p| strip_prefix_component(&p, new_prefix));
        if let Some(from) = &s.rename_from {
            old_path = Some(from.clone());
        }
        if let Some(to) = &s.rename_to {
            new_path = Some(to.clone());
        }
        if old_path.is_none() && new_path.is_none() {
            return Err(DiffError {
                line: s.start_line,
                reason: "a file section names no path".into(),
            });
        }
        if !s.git && s.hunks.is_empty() {
            return Err(DiffError {
                line: s.start_line,
                reason: "a file section has no hunks".into(),
            });
        }
        let kind = if s.rename_from.is_some() && s.rename_to.is_some() {
            if s.copy {
                ChangeKind::Copied
            } else {
                ChangeKind::Renamed
            }
        } else if old_path.is_none() {
            ChangeKind::Added
        } else if new_path.is_none() {
            ChangeKind::Deleted
        } else {
            ChangeKind::Modified
        };
        files.push(FilePatch {
            old_path,
            new_path,
            kind,
            old_mode: s.old_mode,
            new_mode: s.new_mode,
            binary: s.binary,
            hunks: s.hunks,
            raw: s.raw,
        });
    }
    Ok(PatchSet { files, strip })
}

/// Renders the canonical diff that creates `path` with `content` (git style,
/// mode 100644), the form `test_patch` takes when generated from a task tree.
pub fn render_added_file(path: &str, content: &str) -> String {
    let mut out = format!("diff --git a/{path} b/{path}\nnew file mode 100644\n");
    if content.is_empty() {
        return out;
    }
    let lines: Vec<&str> = content.split_inclusive('\n').collect();
    out.push_str(&format!(
        "--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{} @@\n",
        lines.len()
    ));
    for line in lines {
        out.push('+');
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_modify_with_offsets_and_prefixes() {
        let p = "diff --git a/src/x.py b/src/x.py\nindex 111..222 100644\n--- a/src/x.py\n+++ b/src/x.py\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n";
        let set = parse_patch(p).unwrap();
        assert_eq!(set.strip, 1);
        assert_eq!(set.files.len(), 1);
        let f = &set.files[0];
        assert_eq!(f.kind, ChangeKind::Modified);
        assert_eq!(f.old_path.as_deref(), Some("src/x.py"));
        assert_eq!(f.new_mode.as_deref(), Some("100644"));
        assert_eq!(f.raw, p);
    }

    #[test]
    fn plain_headers_with_and_without_prefixes() {
        let prefixed =
            "--- a/src/x.py\t2024-01-01\n+++ b/src/x.py\t2024-01-02\n@@ -1 +1 @@\n-a\n+b\n";
        let set = parse_patch(prefixed).unwrap();
        assert_eq!(set.strip, 1);
        assert_eq!(set.files[0].new_path.as_deref(), Some("src/x.py"));
        let bare = "--- src/x.py\n+++ src/x.py\n@@ -1 +1 @@\n-a\n+b\n";
        let set = parse_patch(bare).unwrap();
        assert_eq!(set.strip, 0);
        assert_eq!(set.files[0].old_path.as_deref(), Some("src/x.py"));
    }

    #[test]
    fn removed_line_that_looks_like_a_header_stays_in_its_hunk() {
        let p = "--- a/q.sql\n+++ b/q.sql\n@@ -1,2 +1,1 @@\n--- comment\n+++ new\n-x\n";
        // "--- comment" is a removed line "-- comment"; "+++ new" an added line.
        let p = p.replace("-x\n", "");
        let p = p.replace("@@ -1,2 +1,1 @@", "@@ -1 +1 @@");
        let set = parse_patch(&p).unwrap();
        assert_eq!(set.files.len(), 1);
        assert_eq!(
            set.files[0].hunks[0].lines,
            vec![
                HunkLine::Removed("-- comment".into()),
                HunkLine::Added("++ new".into())
            ]
        );
    }

    #[test]
    fn new_deleted_renamed_and_mode_changes() {
        let p = concat!(
            "diff --git a/new.py b/new.py\nnew file mode 100755\n--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2\n",
            "diff --git a/old.py b/old.py\ndeleted file mode 100644\n--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n",
            "diff --git a/a.py b/b.py\nsimilarity index 100%\nrename from a.py\nrename to b.py\n",
            "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n",
            "diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n",
        );
        let set = parse_patch(p).unwrap();
        let kinds: Vec<_> = set.files.iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            vec![
                ChangeKind::Added,
                ChangeKind::Deleted,
                ChangeKind::Renamed,
                ChangeKind::Modified,
                ChangeKind::Added
            ]
        );
        assert_eq!(set.files[0].added_content().unwrap(), "x = 1\ny = 2\n");
        assert_eq!(set.files[2].touched_paths(), vec!["a.py", "b.py"]);
        assert_eq!(set.files[3].new_mode.as_deref(), Some("100755"));
        assert!(set.files[4].involves_symlink());
        assert_eq!(set.files[4].added_content().unwrap(), "/etc/passwd");
    }

    #[test]
    fn quoted_paths_are_unquoted() {
        let p = "diff --git \"a/caf\\303\\251 x.py\" \"b/caf\\303\\251 x.py\"\nnew file mode 100644\n--- /dev/null\n+++ \"b/caf\\303\\251 x.py\"\n@@ -0,0 +1 @@\n+1\n";
        let set = parse_patch(p).unwrap();
        assert_eq!(set.files[0].new_path.as_deref(), Some("café x.py"));
    }

    #[test]
    fn truncated_and_malformed_patches_are_errors() {
        let truncated = "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n";
        let err = parse_patch(truncated).unwrap_err();
        assert!(
            err.reason.contains("truncated") || err.reason.contains("ends early"),
            "{err}"
        );
        let bad_header = "--- a/x\n+++ b/x\n@@ -1,x +1 @@\n-a\n+b\n";
        assert!(parse_patch(bad_header).is_err());
    }

    #[test]
    fn garbage_and_empty_parse_to_no_sections() {
        assert!(parse_patch("").unwrap().files.is_empty());
        assert!(parse_patch("hello\nworld\n").unwrap().files.is_empty());
    }

    #[test]
    fn commit_message_preamble_is_ignored() {
        let p = "From abc\nSubject: fix\n\n---\n x | 2 +-\n\ndiff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n";
        let set = parse_patch(p).unwrap();
        assert_eq!(set.files.len(), 1);
        assert_eq!(set.files[0].new_path.as_deref(), Some("x"));
    }

    #[test]
    fn a_git_header_without_prefixes_is_refused() {
        let p = "diff --git src/conftest.py src/conftest.py\n--- src/conftest.py\n+++ src/conftest.py\n@@ -1 +1 @@\n-a\n+b\n";
        let err = parse_patch(p).unwrap_err();
        assert!(err.reason.contains("prefixes"), "{err}");
    }

    #[test]
    fn nothing_may_hide_behind_a_binary_section() {
        let binary = "diff --git a/src/b.bin b/src/b.bin\nnew file mode 100644\nindex 0000000..8352675\nGIT binary patch\nliteral 3\nKcmZQzWC8#H2LJ>B\n\nliteral 0\nHcmV?d00001\n\n";
        let set = parse_patch(binary).unwrap();
        assert!(set.files[0].binary);
        let smuggled =
            format!("{binary}--- a/conftest.py\n+++ b/conftest.py\n@@ -1 +1 @@\n-a\n+b\n");
        let err = parse_patch(&smuggled).unwrap_err();
        assert!(err.reason.contains("after a binary section"), "{err}");
        let next = format!("{binary}diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n");
        assert_eq!(parse_patch(&next).unwrap().files.len(), 2);
    }

    #[test]
    fn huge_binary_literals_are_refused_before_anything_expands_them() {
        let p = "diff --git a/src/z.bin b/src/z.bin\nnew file mode 100644\nGIT binary patch\nliteral 1073741824\nKcmZQzWC8#H2LJ>B\n\n";
        let err = parse_patch(p).unwrap_err();
        assert!(err.reason.contains("over the limit"), "{err}");
    }

    /// git's base85, for building binary sections in tests.
    fn base85_lines(data: &[u8]) -> String {
        const ALPHABET: &[u8; 85] =
            b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";
        let mut out = String::new();
        for chunk in data.chunks(52) {
            let len = chunk.len() as u8;
            out.push(if len <= 26 {
                (b'A' + len - 1) as char
            } else {
                (b'a' + len - 27) as char
            });
            for word in chunk.chunks(4) {
                let mut padded = [0u8; 4];
                padded[..word.len()].copy_from_slice(word);
                let mut n = u32::from_be_bytes(padded) as u64;
                let mut group = [0u8; 5];
                for slot in group.iter_mut().rev() {
                    *slot = ALPHABET[(n % 85) as usize];
                    n /= 85;
                }
                out.push_str(std::str::from_utf8(&group).unwrap());
            }
            out.push('\n');
        }
        out
    }

    fn varint(mut n: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    /// A copy of `src/a.py` made by a delta that repeats its whole base
    /// `times` times.
    fn delta_patch(base_len: u64, times: u64) -> String {
        let mut delta = Vec::new();
        varint(base_len, &mut delta);
        varint(base_len * times, &mut delta);
        for _ in 0..times {
            delta.extend_from_slice(&[0x80 | 0x10 | 0x20, base_len as u8, (base_len >> 8) as u8]);
        }
        let z = miniz_oxide::deflate::compress_to_vec_zlib(&delta, 9);
        format!(
            "diff --git a/src/a.py b/src/big.py\nsimilarity index 0%\ncopy from src/a.py\ncopy to src/big.py\nGIT binary patch\ndelta {}\n{}\n",
            delta.len(),
            base85_lines(&z)
        )
    }

    #[test]
    fn a_binary_delta_counts_the_file_it_makes_not_its_own_size() {
        // Red-team finding: a 4 KB patch of deltas that each repeat a 3 KB
        // file 80,000 times made git write 2 GiB.
        assert_eq!(base85_line("zcmZQzWC8#H2LJ>B").map(|b| b.len()), None);
        let small = delta_patch(3000, 10);
        let set = parse_patch(&small).unwrap();
        assert!(set.files[0].binary);
        let bomb = delta_patch(3000, 80_000);
        assert!(bomb.len() < 2_000, "{}", bomb.len());
        let err = parse_patch(&bomb).unwrap_err();
        assert!(
            err.reason.contains("makes a file of 240000000 bytes"),
            "{err}"
        );
        // Under the per-file bound, many of them still meet the total bound.
        let many: String = (0..8).map(|_| delta_patch(3000, 5_000)).collect();
        let err = parse_patch(&many).unwrap_err();
        assert!(err.reason.contains("in all"), "{err}");
        // A delta whose data does not start with a header is refused.
        let broken = "diff --git a/src/a.py b/src/b.py\ncopy from src/a.py\ncopy to src/b.py\nGIT binary patch\ndelta 5\nAAAAAA\n\n";
        assert!(parse_patch(broken).is_err());
    }

    #[test]
    fn git_s_own_binary_deltas_parse_with_their_result_size() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args([
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "-c",
                    "core.hooksPath=/dev/null",
                ])
                .args(args)
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        };
        git(&["init", "-q"]);
        let base: Vec<u8> = (0..200_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        std::fs::write(dir.path().join("blob.bin"), &base).unwrap();
        git(&["add", "."]);
        git(&["commit", "-qm", "base"]);
        let mut changed = base.clone();
        changed[1000] ^= 0xff;
        changed.extend_from_slice(&base[..50_000]);
        std::fs::write(dir.path().join("blob.bin"), &changed).unwrap();
        let patch = String::from_utf8(git(&["diff", "--binary"])).unwrap();
        assert!(patch.contains("\ndelta "), "{patch}");
        let set = parse_patch(&patch).unwrap();
        assert!(set.files[0].binary);
        let tight = PatchLimits {
            max_binary_bytes: changed.len() as u64 - 1,
            ..PatchLimits::default()
        };
        let err = parse_patch_with(&patch, &tight).unwrap_err();
        assert!(
            err.reason
                .contains(&format!("makes a file of {} bytes", changed.len())),
            "{err}"
        );
    }

    #[test]
    fn modes_are_read_as_octal_numbers() {
        for (mode, link) in [
            ("120000", true),
            ("0120000", true),
            ("120000 ", true),
            ("160000", true),
            ("100644", false),
            ("0100755", false),
        ] {
            let p = format!("diff --git a/l b/l\nnew file mode {mode}\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+x\n");
            let set = parse_patch(&p).unwrap();
            assert_eq!(set.files[0].involves_symlink(), link, "{mode}");
        }
        let p =
            "diff --git a/l b/l\nnew file mode 140000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+x\n";
        assert!(parse_patch(p).unwrap_err().reason.contains("mode"));
    }

    #[test]
    fn rendered_added_file_round_trips() {
        for content in ["", "a\n", "a\nb", "x\n\ny\n"] {
            let diff = render_added_file("tests/hidden/t.py", content);
            let set = parse_patch(&diff).unwrap();
            assert_eq!(set.files.len(), 1);
            assert_eq!(set.files[0].kind, ChangeKind::Added);
            let got = if content.is_empty() {
                String::new()
            } else {
                set.files[0].added_content().unwrap()
            };
            assert_eq!(got, content);
        }
    }
}
