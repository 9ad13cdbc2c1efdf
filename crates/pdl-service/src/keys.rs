//! API keys: made from 32 random bytes, shown once, stored as their SHA-256.

use sha2::{Digest, Sha256};

/// The prefix every key starts with (so a leaked key is recognisable).
pub const KEY_PREFIX: &str = "pdlk_";

/// A new random key.
pub fn new_key() -> String {
    format!("{KEY_PREFIX}{}", crate::db::random_hex(32))
}

/// What is stored of a key: the hex SHA-256 of its text. A key has 256 bits
/// of entropy, so a plain digest is as strong as a slow one.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// `text` with everything that may be a key, or most of one, replaced by
/// `pdlk_<redacted>`: for log lines and error messages that repeat what a
/// client sent, in case a key was sent where it does not belong (a URL path).
/// That is the prefix in any case and with `_` or `-`, with the hex digits
/// after it; and any run of 32 or more characters that could spell a key's
/// digits or an encoding of it (hex, base64), whatever precedes it.
pub fn redact_keys(text: &str) -> String {
    let token = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_' | '-');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        // The prefix, in any case, with `_` or `-`.
        let lower = rest.get(..5).map(str::to_ascii_lowercase);
        if matches!(lower.as_deref(), Some("pdlk_") | Some("pdlk-")) {
            let after = &rest[5..];
            let digits = after
                .find(|c: char| !c.is_ascii_hexdigit())
                .unwrap_or(after.len());
            out.push_str(KEY_PREFIX);
            if digits > 0 {
                out.push_str("<redacted>");
            }
            rest = &after[digits..];
            continue;
        }
        // A long token.
        let len = rest.find(|c: char| !token(c)).unwrap_or(rest.len());
        if len >= 32 {
            let run = &rest[..len];
            // Path separators split a path's parts; a long part is redacted.
            let mut first = true;
            for part in run.split('/') {
                if !first {
                    out.push('/');
                }
                first = false;
                if part.len() >= 32 {
                    out.push_str("pdlk_<redacted>");
                } else {
                    out.push_str(&redact_keys(part));
                }
            }
            rest = &rest[len..];
            continue;
        }
        let step = if len > 0 {
            len
        } else {
            rest.chars().next().map_or(1, char::len_utf8)
        };
        out.push_str(&rest[..step]);
        rest = &rest[step..];
    }
    out
}

/// True when `name` holds something that may be a key (see [`redact_keys`]):
/// names that every submitter of a dataset sees (model names, dataset names)
/// must not.
pub fn may_hold_a_key(name: &str) -> bool {
    redact_keys(name) != name
}

/// A request path as the log shows it: percent-decoded (so that an encoded
/// key is seen as one), then with keys redacted.
pub fn loggable_path(raw: &str) -> String {
    let decoded = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
    redact_keys(&decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_random_and_hashed() {
        let a = new_key();
        let b = new_key();
        assert_ne!(a, b);
        assert!(a.starts_with(KEY_PREFIX) && a.len() == KEY_PREFIX.len() + 64);
        assert_eq!(hash_key(&a).len(), 64);
        assert!(!hash_key(&a).contains(&a[KEY_PREFIX.len()..]));
    }

    #[test]
    fn keys_in_text_are_redacted() {
        let key = new_key();
        let line = format!("GET /{key}/x?{key} run `{key}` pdlk_ pdlk_zz");
        let red = redact_keys(&line);
        assert!(!red.contains(&key[KEY_PREFIX.len()..]), "{red}");
        assert_eq!(
            red,
            "GET /pdlk_<redacted>/x?pdlk_<redacted> run `pdlk_<redacted>` pdlk_ pdlk_zz"
        );
        // Other spellings of a key, or of its digits.
        let digits = &key[KEY_PREFIX.len()..];
        let upper = key.to_ascii_uppercase();
        let hyphen = key.replace('_', "-");
        let bytes_hex = hex::encode(key.as_bytes());
        for spelled in [upper.as_str(), hyphen.as_str(), digits, bytes_hex.as_str()] {
            let red = redact_keys(&format!("GET /api/runs/{spelled}"));
            assert!(
                !red.contains(&digits[8..40]) && !red.contains(&spelled[8..]),
                "{red}"
            );
            assert!(may_hold_a_key(spelled));
        }
        // Ordinary text and names are kept.
        let plain = "GET /api/runs/0123456789abcdef01234567/report model gpt-4o-2024-08-06";
        assert_eq!(redact_keys(plain), plain);
        assert!(!may_hold_a_key("my-model/v2 (2026-11-30)"));
        let digits = "0123456789abcdef".repeat(4);
        let digits = digits.as_str();
        for encoded in [
            format!("/api/runs/pdlk%5F{digits}"),
            format!("/api/runs/pdlk_%3{}{}", &digits[..1], &digits[1..]),
            format!("/api/runs/%70dlk_{digits}"),
        ] {
            let logged = loggable_path(&encoded);
            assert!(!logged.contains(&digits[1..]), "{encoded}: {logged}");
        }
    }
}
