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
}
