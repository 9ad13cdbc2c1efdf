//! Text from data on its way to a terminal ([`terminal_safe`]).
//!
//! A dataset, a predictions file or a run folder can hold any characters: an
//! escape sequence in a task's domain, a test ID or a path could clear the
//! screen, move the cursor to forge a passing report, set the window title or
//! write the clipboard (OSC 52). Everything such text passes through on its
//! way to a terminal (tables, errors and warnings on stderr, progress
//! messages) goes through this one function.

use std::borrow::Cow;
use std::fmt::Write as _;

/// True for a character that controls a terminal or reorders what it shows:
/// every C0 and C1 control but the newline (DEL included), the Unicode line
/// and paragraph separators, and the bidirectional marks, embeddings,
/// overrides and isolates.
fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(
            c,
            '\u{200E}' | '\u{200F}' | '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every terminal control character written as a visible escape
/// (`\u{1b}`); newlines are kept. Borrowed when nothing needed escaping.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if needs_escape(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_plain_text_is_borrowed() {
        assert!(matches!(terminal_safe("plain\ntext é"), Cow::Borrowed(_)));
        assert_eq!(
            terminal_safe("a\u{1b}[2J\u{1b}[Hb\u{7}c\rd\te\u{9b}f\u{7f}"),
            "a\\u{1b}[2J\\u{1b}[Hb\\u{7}c\\u{d}d\\u{9}e\\u{9b}f\\u{7f}"
        );
        assert_eq!(
            terminal_safe("\u{1b}]52;c;SGVsbG8=\u{7}"),
            "\\u{1b}]52;c;SGVsbG8=\\u{7}"
        );
        assert_eq!(
            terminal_safe("x\u{202e}y\u{2028}z"),
            "x\\u{202e}y\\u{2028}z"
        );
    }
}
