//! Console sessions: what a sign-in hands the browser and how each request
//! is tied back to the API key it acts as. The cookie holds a random token,
//! never the key; the store keeps only the token's SHA-256 (so every API
//! replica answers the same cookie, and a copy of the database opens no
//! session). The CSRF token is derived from the session's token: the page
//! reads it from `/api/me` and sends it in `X-CSRF-Token` with every request
//! that changes something; a cross-site page can read neither.

use std::time::Duration;

use countersign_domain::{Millis, Principal};
use countersign_store::{ConsoleSession, Tenant};
use http::{HeaderMap, HeaderValue, header};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The session cookie's name.
pub const COOKIE: &str = "countersign_session";
/// The header every state-changing request carries its CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// A session's secret: 32 random bytes, as hex in the cookie.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    pub fn generate() -> Token {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        Token(hex::encode(bytes))
    }

    /// The token a request's `Cookie` headers carry, if any well-formed one.
    pub fn from_cookies(headers: &HeaderMap) -> Option<Token> {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == COOKIE)
            .map(|(_, value)| value.trim())
            .filter(|value| value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(|value| Token(value.to_ascii_lowercase()))
    }

    /// What the store keeps and finds the session by.
    pub fn hash(&self) -> Vec<u8> {
        Sha256::digest(self.0.as_bytes()).to_vec()
    }

    /// The session's CSRF token: a hash of the secret under its own label,
    /// so neither gives the other away.
    pub fn csrf(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(b"countersign-console-csrf\n");
        hasher.update(self.0.as_bytes());
        hex::encode(hasher.finalize())
    }

    /// Whether `headers` carry the session's CSRF token (compared in
    /// constant time).
    pub fn csrf_matches(&self, headers: &HeaderMap) -> bool {
        let mut presented = headers.get_all(CSRF_HEADER).iter();
        match (presented.next(), presented.next()) {
            (Some(value), None) => bool::from(value.as_bytes().ct_eq(self.csrf().as_bytes())),
            _ => false,
        }
    }

    /// The row a sign-in writes for this token.
    pub fn session(&self, principal: &Principal, now: Millis, ttl: Duration) -> ConsoleSession {
        ConsoleSession {
            token_hash: self.hash(),
            tenant: principal.tenant.clone(),
            key_id: principal.key_id.clone(),
            created_at: now,
            expires_at: now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)),
            revoked_at: None,
        }
    }

    /// The `Set-Cookie` that hands this token to the browser: script cannot
    /// read it, no other site's request carries it, and `secure` keeps it
    /// off plain HTTP.
    pub fn cookie(&self, ttl: Duration, secure: bool) -> HeaderValue {
        set_cookie(&self.0, ttl.as_secs(), secure)
    }
}

/// The `Set-Cookie` that makes the browser forget the session.
pub fn cleared_cookie(secure: bool) -> HeaderValue {
    set_cookie("", 0, secure)
}

fn set_cookie(value: &str, max_age: u64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    ))
    .expect("a cookie of hex and fixed text is a valid header")
}

/// Whether a session row still opens the console at `now`.
pub fn is_live(session: &ConsoleSession, now: Millis) -> bool {
    session.revoked_at.is_none() && now < session.expires_at
}

/// A signed-in request: who it acts as (exactly what the gRPC `auth` layer
/// puts in a call's extensions) and its session's token.
#[derive(Debug, Clone)]
pub struct Signed {
    pub principal: Principal,
    pub tenant: Tenant,
    pub token: Token,
}

impl Signed {
    /// A call to one of the API's services as this caller, as `auth` would
    /// hand it on: the principal and its tenant in the extensions.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.extensions_mut().insert(self.principal.clone());
        request.extensions_mut().insert(self.tenant.clone());
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn tokens_are_random_and_stored_only_as_their_hash() {
        let (a, b) = (Token::generate(), Token::generate());
        assert_ne!(a, b);
        assert_eq!(a.hash().len(), 32);
        assert_ne!(a.hash(), a.0.as_bytes());
        assert!(!hex::encode(a.hash()).contains(&a.0));
        assert_ne!(a.csrf(), a.0, "the CSRF token is not the secret");
        assert_ne!(hex::encode(a.hash()), a.csrf());
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_only_when_asked() {
        let token = Token::generate();
        let plain = token.cookie(Duration::from_secs(3600), false);
        let plain = plain.to_str().unwrap();
        assert!(plain.starts_with(&format!("{COOKIE}={}; ", token.0)));
        assert!(plain.contains("; HttpOnly"));
        assert!(plain.contains("; SameSite=Strict"));
        assert!(plain.contains("; Max-Age=3600"));
        assert!(plain.contains("; Path=/"));
        assert!(!plain.contains("Secure"));
        let secure = token.cookie(Duration::from_secs(3600), true);
        assert!(secure.to_str().unwrap().ends_with("; Secure"));
        let cleared = cleared_cookie(false);
        assert!(
            cleared
                .to_str()
                .unwrap()
                .starts_with(&format!("{COOKIE}=; "))
        );
        assert!(cleared.to_str().unwrap().contains("Max-Age=0"));
    }

    #[test]
    fn the_token_is_read_from_the_cookie_header_and_nothing_else() {
        let token = Token::generate();
        let cookie = format!("theme=dark; {COOKIE}={}; other=1", token.0);
        assert_eq!(
            Token::from_cookies(&headers(&[("cookie", &cookie)])),
            Some(token.clone())
        );
        assert_eq!(Token::from_cookies(&headers(&[])), None);
        for bad in [
            "x",
            "not-hex-at-all",
            &"g".repeat(64),
            &format!("{}0", token.0),
        ] {
            let cookie = format!("{COOKIE}={bad}");
            assert_eq!(
                Token::from_cookies(&headers(&[("cookie", &cookie)])),
                None,
                "{bad}"
            );
        }
        let elsewhere = format!("Bearer {}", token.0);
        assert_eq!(
            Token::from_cookies(&headers(&[("authorization", &elsewhere)])),
            None
        );
    }

    #[test]
    fn only_the_sessions_own_csrf_token_once_passes() {
        let (token, other) = (Token::generate(), Token::generate());
        assert!(token.csrf_matches(&headers(&[(CSRF_HEADER, &token.csrf())])));
        assert!(!token.csrf_matches(&headers(&[])));
        assert!(!token.csrf_matches(&headers(&[(CSRF_HEADER, &other.csrf())])));
        assert!(!token.csrf_matches(&headers(&[(CSRF_HEADER, "")])));
        assert!(!token.csrf_matches(&headers(&[(CSRF_HEADER, &token.0)])));
        assert!(
            !token.csrf_matches(&headers(&[
                (CSRF_HEADER, &token.csrf()),
                (CSRF_HEADER, &other.csrf())
            ])),
            "two tokens are none"
        );
    }

    #[test]
    fn a_session_is_live_until_it_expires_or_is_revoked() {
        let principal = Principal {
            tenant: "acme".into(),
            key_id: "k1".into(),
            name: "ann".into(),
            role: countersign_domain::Role::Oncall,
            agent: false,
            person: Some("ann@example.com".into()),
        };
        let token = Token::generate();
        let mut session = token.session(&principal, 1_000, Duration::from_secs(60));
        assert_eq!(session.token_hash, token.hash());
        assert_eq!(
            (session.tenant.as_str(), session.key_id.as_str()),
            ("acme", "k1")
        );
        assert_eq!(session.expires_at, 61_000);
        assert!(is_live(&session, 60_999));
        assert!(!is_live(&session, 61_000));
        session.revoked_at = Some(2_000);
        assert!(!is_live(&session, 2_001));
    }
}
