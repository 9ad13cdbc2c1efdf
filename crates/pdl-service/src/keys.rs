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

/// `text` with everything shaped like a key (the prefix and the hex digits
/// after it) replaced by `pdlk_<redacted>`: for log lines and error messages
/// that repeat what a client sent, in case a key was sent where it does not
/// belong (a URL path).
pub fn redact_keys(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(KEY_PREFIX) {
        let after = &rest[at + KEY_PREFIX.len()..];
        let digits = after
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(after.len());
        out.push_str(&rest[..at]);
        out.push_str(KEY_PREFIX);
        if digits > 0 {
            out.push_str("<redacted>");
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
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
