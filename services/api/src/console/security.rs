//! The headers every console response carries, whatever answered it (a page,
//! an asset, the API, an error): a Content-Security-Policy that runs only the
//! console's own script and style files (no inline script or style, no other
//! origin, no framing, no form posting elsewhere), no MIME sniffing, no
//! referrer, and no caching of anything a session can read.

use axum::response::Response;
use http::{HeaderName, HeaderValue, header};

pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     base-uri 'none'; frame-ancestors 'none'";

const HEADERS: &[(HeaderName, &str)] = &[
    (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::REFERRER_POLICY, "no-referrer"),
    (header::CACHE_CONTROL, "no-store"),
];

/// Sets the headers on `response` (replacing any of the same name).
pub async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in HEADERS {
        headers.insert(name.clone(), HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_response_gets_a_strict_policy_and_the_other_headers() {
        let mut response = Response::new(axum::body::Body::empty());
        response.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("max-age=60"),
        );
        let response = secure_headers(response).await;
        let policy = response.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "form-action 'self'",
        ] {
            assert!(policy.contains(directive), "{directive}");
        }
        for loose in [
            "unsafe-inline",
            "unsafe-eval",
            "*",
            "http:",
            "https:",
            "data:",
        ] {
            assert!(!policy.contains(loose), "{loose}");
        }
        assert_eq!(
            response.headers()[header::X_CONTENT_TYPE_OPTIONS],
            "nosniff"
        );
        assert_eq!(response.headers()[header::REFERRER_POLICY], "no-referrer");
        assert_eq!(response.headers()[header::X_FRAME_OPTIONS], "DENY");
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
    }
}
