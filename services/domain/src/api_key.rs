//! API keys: `cs_<id>_<secret>`, a public 16-hex-digit id and a 256-bit secret.
//! Only the SHA-256 of the whole key is stored; lookup is by id and the hash is
//! compared in constant time.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub const PREFIX: &str = "cs_";
const ID_HEX: usize = 16;
const SECRET_HEX: usize = 64;

/// A key that has the right shape. Whether it exists is the store's business.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedKey {
    pub id: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed API key")]
pub struct ApiKeyError;

/// A freshly minted key: the full text (shown once) and what is stored.
#[derive(Debug, Clone)]
pub struct MintedKey {
    pub id: String,
    pub key: String,
    pub hash: [u8; 32],
}

/// Builds a key from caller-supplied random bytes (this crate does no I/O).
pub fn mint(id_bytes: [u8; 8], secret: [u8; 32]) -> MintedKey {
    let id = hex::encode(id_bytes);
    let key = format!("{PREFIX}{id}_{}", hex::encode(secret));
    let hash = hash(&key);
    MintedKey { id, key, hash }
}

/// Checks the shape of a presented key and returns its id.
pub fn parse(key: &str) -> Result<ParsedKey, ApiKeyError> {
    let rest = key.strip_prefix(PREFIX).ok_or(ApiKeyError)?;
    let (id, secret) = rest.split_once('_').ok_or(ApiKeyError)?;
    let lower_hex = |s: &str| s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if id.len() != ID_HEX || secret.len() != SECRET_HEX || !lower_hex(id) || !lower_hex(secret) {
        return Err(ApiKeyError);
    }
    Ok(ParsedKey { id: id.to_owned() })
}

pub fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Constant-time comparison of a presented key against a stored hash.
pub fn verify(key: &str, stored_hash: &[u8]) -> bool {
    let presented = hash(key);
    stored_hash.len() == presented.len() && bool::from(presented.ct_eq(stored_hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_key_parses_to_its_id_and_verifies_against_its_hash() {
        let minted = mint([0xab; 8], [7; 32]);
        assert!(minted.key.starts_with("cs_abababababababab_"));
        assert_eq!(parse(&minted.key).unwrap().id, minted.id);
        assert!(verify(&minted.key, &minted.hash));
    }

    #[test]
    fn a_key_with_one_changed_secret_digit_does_not_verify() {
        let minted = mint([1; 8], [2; 32]);
        let mut forged = minted.key.clone();
        let last = forged.pop().unwrap();
        forged.push(if last == '0' { '1' } else { '0' });
        assert!(parse(&forged).is_ok());
        assert!(!verify(&forged, &minted.hash));
    }

    #[test]
    fn malformed_keys_are_refused() {
        for bad in [
            "",
            "Bearer x",
            "cs_",
            "cs_abc_def",
            "xx_abababababababab_0202020202020202020202020202020202020202020202020202020202020202",
            "cs_ABABABABABABABAB_0202020202020202020202020202020202020202020202020202020202020202",
            "cs_abababababababab_02020202",
        ] {
            assert_eq!(parse(bad), Err(ApiKeyError), "{bad:?}");
        }
    }

    #[test]
    fn a_hash_of_the_wrong_length_never_verifies() {
        let minted = mint([3; 8], [4; 32]);
        assert!(!verify(&minted.key, &minted.hash[..31]));
    }
}
