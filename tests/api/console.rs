//! The console over HTTP, against the real server: sessions (a random
//! token in an HttpOnly, SameSite=Strict cookie, only its hash stored,
//! revoked at sign out and with its key), CSRF on every change, the security
//! headers on every answer, and the same roles, tenancy and agent view as
//! the gRPC API. The pages themselves are tested in Chromium (tests/console).

use std::{net::SocketAddr, time::Duration};

use countersign_domain::Role;
use sha2::{Digest, Sha256};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::helpers::{TestApp, valid_spec};

const WAIT: Duration = Duration::from_secs(10);

/// An HTTP answer: status, headers (lower-case names), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|_| panic!("JSON: {}", self.body))
    }

    /// The session token the answer's cookie sets.
    fn session_cookie(&self) -> String {
        let cookie = self.header("set-cookie").expect("a Set-Cookie");
        cookie
            .strip_prefix("countersign_session=")
            .and_then(|rest| rest.split(';').next())
            .expect("the session cookie")
            .to_owned()
    }
}

/// One request over its own connection (`Connection: close`), the body
/// de-chunked.
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut stream = TcpStream::connect(addr)
        .await
        .expect("connect to the console");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut raw))
        .await
        .expect("an answer in time")
        .unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Answer {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

struct Console {
    addr: SocketAddr,
}

impl Console {
    fn of(app: &TestApp) -> Console {
        Console {
            addr: app.console_addr.expect("the test app serves the console"),
        }
    }

    async fn sign_in(&self, key: &str) -> Answer {
        let body = serde_json::json!({ "key": key }).to_string();
        http(
            self.addr,
            "POST",
            "/api/session",
            &[("Content-Type", "application/json")],
            &body,
        )
        .await
    }

    /// A signed-in session: its cookie header and CSRF token.
    async fn session(&self, key: &str) -> (String, String) {
        let answer = self.sign_in(key).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let cookie = format!("countersign_session={}", answer.session_cookie());
        let csrf = answer.json()["csrf"].as_str().unwrap().to_owned();
        (cookie, csrf)
    }

    async fn get(&self, path: &str, cookie: &str) -> Answer {
        http(self.addr, "GET", path, &[("Cookie", cookie)], "").await
    }
}

#[tokio::test]
async fn a_sign_in_sets_a_cookie_of_a_random_token_and_sign_out_ends_the_session() {
    let app = TestApp::spawn().await;
    let console = Console::of(&app);
    let key = app.key("acme", Role::Oncall).await;

    assert_eq!(console.sign_in("cs_wrong").await.status, 401);
    let answer = console.sign_in(&key).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let cookie = answer.header("set-cookie").unwrap().to_owned();
    for attribute in [
        "; HttpOnly",
        "; SameSite=Strict",
        "; Path=/",
        "; Max-Age=28800",
    ] {
        assert!(cookie.contains(attribute), "{attribute}: {cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "plain HTTP by default: {cookie}"
    );
    let token = answer.session_cookie();
    assert!(!cookie.contains(&key) && !key.contains(&token));
    // Only the token's hash is stored.
    let hash = Sha256::digest(token.as_bytes()).to_vec();
    let stored = app
        .store
        .find_console_session(&hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.tenant, "acme");
    assert!(
        app.store
            .find_console_session(token.as_bytes())
            .await
            .unwrap()
            .is_none()
    );
    let me = answer.json();
    assert_eq!(
        (me["tenant"].as_str(), me["role"].as_str()),
        (Some("acme"), Some("oncall"))
    );

    let session = format!("countersign_session={token}");
    assert_eq!(console.get("/api/me", &session).await.status, 200);
    // Sign out is a change: without the CSRF token it is refused.
    let refused = http(
        console.addr,
        "POST",
        "/api/session/end",
        &[("Cookie", &session)],
        "",
    )
    .await;
    assert_eq!(refused.status, 403);
    assert_eq!(console.get("/api/me", &session).await.status, 200);
    let csrf = me["csrf"].as_str().unwrap();
    let out = http(
        console.addr,
        "POST",
        "/api/session/end",
        &[("Cookie", &session), ("X-CSRF-Token", csrf)],
        "",
    )
    .await;
    assert_eq!(out.status, 204);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(console.get("/api/me", &session).await.status, 401);
    assert_eq!(console.get("/api/escalations", &session).await.status, 401);
}

#[tokio::test]
async fn a_session_ends_when_its_lifetime_is_over() {
    let lifetime = Duration::from_secs(1);
    let app = TestApp::spawn_with(|c| {
        c.console.as_mut().expect("the console is on").session_ttl = lifetime;
    })
    .await;
    let console = Console::of(&app);
    let answer = console.sign_in(&app.key("acme", Role::Oncall).await).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    // The cookie lives no longer than the session (Max-Age in whole seconds).
    let cookie = answer.header("set-cookie").unwrap().to_owned();
    assert!(cookie.contains("; Max-Age=1;"), "{cookie}");
    let session = format!("countersign_session={}", answer.session_cookie());
    assert_eq!(console.get("/api/me", &session).await.status, 200);
    tokio::time::sleep(lifetime + Duration::from_millis(300)).await;
    assert_eq!(console.get("/api/me", &session).await.status, 401);
    assert_eq!(console.get("/api/escalations", &session).await.status, 401);
}

#[tokio::test]
async fn a_revoked_key_ends_its_sessions() {
    let app = TestApp::spawn_with(|api| api.credential_cache_ttl = Duration::ZERO).await;
    let console = Console::of(&app);
    let key = app.key("acme", Role::Admin).await;
    let (session, _) = console.session(&key).await;
    assert_eq!(console.get("/api/me", &session).await.status, 200);
    let id = countersign_domain::api_key::parse(&key).unwrap().id;
    app.store.revoke_api_key(&id).await.unwrap();
    assert_eq!(console.get("/api/me", &session).await.status, 401);
}

#[tokio::test]
async fn a_change_without_the_sessions_csrf_token_or_from_another_origin_is_refused() {
    let app = TestApp::spawn().await;
    let console = Console::of(&app);
    let (session, csrf) = console.session(&app.key("acme", Role::Oncall).await).await;
    let (_, other_csrf) = console.session(&app.key("acme", Role::Oncall).await).await;
    let path = "/api/proposals/01NOSUCHPROPOSAL/resolve";
    let vote = r#"{"verdict":"approve","comment":"ok"}"#;
    let json = ("Content-Type", "application/json");
    let cookie = ("Cookie", session.as_str());

    // A cross-site form: the session's cookie, no token.
    let form = http(
        console.addr,
        "POST",
        path,
        &[
            cookie,
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        "verdict=approve",
    )
    .await;
    assert_eq!(
        (form.status, form.json()["code"].as_str()),
        (403, Some("CSRF"))
    );
    for headers in [
        vec![cookie, json],
        vec![cookie, json, ("X-CSRF-Token", other_csrf.as_str())],
        vec![cookie, json, ("X-CSRF-Token", "")],
        vec![
            cookie,
            json,
            ("X-CSRF-Token", csrf.as_str()),
            ("Origin", "http://attacker.example"),
        ],
    ] {
        let refused = http(console.addr, "POST", path, &headers, vote).await;
        assert_eq!(refused.status, 403, "{headers:?}: {}", refused.body);
    }
    // With its token, the request reaches the service, which answers.
    let origin = format!("http://{}", console.addr);
    let reached = http(
        console.addr,
        "POST",
        path,
        &[cookie, json, ("X-CSRF-Token", &csrf), ("Origin", &origin)],
        vote,
    )
    .await;
    assert_eq!(reached.status, 404, "{}", reached.body);
    assert_eq!(reached.json()["code"], "NOT_FOUND");
}

#[tokio::test]
async fn every_answer_carries_a_strict_content_security_policy_and_the_other_headers() {
    let app = TestApp::spawn().await;
    let console = Console::of(&app);
    for path in [
        "/stream",
        "/proposals/x",
        "/assets/console.js",
        "/assets/console.css",
        "/api/me",
        "/api/escalations",
        "/nowhere",
    ] {
        let answer = console.get(path, "").await;
        let policy = answer.header("content-security-policy").unwrap_or_default();
        assert!(
            policy.contains("default-src 'none'")
                && policy.contains("script-src 'self'")
                && policy.contains("style-src 'self'")
                && policy.contains("frame-ancestors 'none'")
                && !policy.contains("unsafe"),
            "{path}: {policy}"
        );
        assert_eq!(
            answer.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(
            answer.header("referrer-policy"),
            Some("no-referrer"),
            "{path}"
        );
        assert_eq!(answer.header("x-frame-options"), Some("DENY"), "{path}");
    }
    assert_eq!(console.get("/api/me", "").await.status, 401);
    // The page runs nothing inline: its only script is the file the policy allows.
    let page = console.get("/inbox", "").await.body;
    assert_eq!(page.matches("<script").count(), 1);
    assert!(page.contains(r#"<script src="/assets/console.js" defer></script>"#));
    assert!(!page.contains("style=") && !page.contains(" onclick=") && !page.contains("<style"));
    let script = console.get("/assets/console.js", "").await.body;
    assert!(
        !script.contains("innerHTML")
            && !script.contains("insertAdjacentHTML")
            && !script.contains("eval(")
    );
}

#[tokio::test]
async fn a_session_acts_with_its_keys_role_and_tenant_and_an_agent_sees_the_terse_view() {
    let app = TestApp::spawn_reviewing(1).await;
    let console = Console::of(&app);
    let agent = app.agent_key("acme", Role::Coordinator).await;
    let id = app.submit_id(&agent, valid_spec()).await;
    app.await_decision(&agent, &id, WAIT).await.unwrap();
    let path = format!("/api/proposals/{id}");

    let (oncall, _) = console.session(&app.key("acme", Role::Oncall).await).await;
    let full = console.get(&path, &oncall).await.json();
    assert!(
        full["decision"]["reason"]
            .as_str()
            .unwrap()
            .contains("no SOP"),
        "{full}"
    );
    assert_eq!(full["decision"]["gates"].as_array().unwrap().len(), 5);

    let (agents, _) = console.session(&agent).await;
    let terse = console.get(&path, &agents).await.json();
    let decision = &terse["decision"];
    assert_eq!(decision["reason"], "", "{terse}");
    assert!(decision["gates"].as_array().unwrap().is_empty());
    assert!(
        decision["agent_message"]
            .as_str()
            .unwrap()
            .contains("Do not retry")
    );
    assert_eq!(console.get("/api/me", &agents).await.json()["agent"], true);

    // Another tenant's proposal is not found; a coordinator reads no log.
    let (other, _) = console.session(&app.key("other", Role::Admin).await).await;
    assert_eq!(console.get(&path, &other).await.status, 404);
    let (coordinator, _) = console
        .session(&app.key("acme", Role::Coordinator).await)
        .await;
    let refused = console.get("/api/decisions", &coordinator).await;
    assert_eq!(refused.status, 403);
    assert!(
        refused.json()["message"]
            .as_str()
            .unwrap()
            .contains("may not read the decision log")
    );
}

#[tokio::test]
async fn the_stream_resumes_after_the_last_event_id_it_was_sent() {
    let app = TestApp::spawn_reviewing(1).await;
    let console = Console::of(&app);
    let key = app.key("acme", Role::Coordinator).await;
    let (session, _) = console.session(&key).await;
    let first = app.submit_id(&key, valid_spec()).await;
    app.await_decision(&key, &first, WAIT).await.unwrap();

    // From the start of the tenant's events: the decision, with its cursor.
    let replay = read_stream(console.addr, &session, "0", &first).await;
    let cursor: u64 = replay
        .split("\n\n")
        .find(|event| event.contains(&first) && event.contains("event: notification"))
        .and_then(|event| event.lines().find_map(|l| l.strip_prefix("id: ")))
        .expect("the decision's event carries its cursor")
        .parse()
        .unwrap();

    // Resumed after it: the next decision, and not the one already sent.
    let mut second_spec = valid_spec();
    second_spec.target = "web-02".into();
    let second = app.submit_id(&key, second_spec).await;
    app.await_decision(&key, &second, WAIT).await.unwrap();
    let resumed = read_stream(console.addr, &session, &cursor.to_string(), &second).await;
    assert!(!resumed.contains(&first), "{resumed}");
}

#[tokio::test]
async fn an_open_stream_ends_when_its_session_is_signed_out() {
    let app = TestApp::spawn().await;
    let console = Console::of(&app);
    let (session, csrf) = console.session(&app.key("acme", Role::Oncall).await).await;
    let mut stream = TcpStream::connect(console.addr).await.unwrap();
    let request = format!(
        "GET /api/stream HTTP/1.1\r\nHost: {}\r\nCookie: {session}\r\n\r\n",
        console.addr
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    let n = stream.read(&mut buffer).await.unwrap();
    seen.extend_from_slice(&buffer[..n]);
    assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"));

    let out = http(
        console.addr,
        "POST",
        "/api/session/end",
        &[("Cookie", &session), ("X-CSRF-Token", &csrf)],
        "",
    )
    .await;
    assert_eq!(out.status, 204);
    // The session check (every 5 s) ends the stream, saying why.
    tokio::time::timeout(WAIT, async {
        while !String::from_utf8_lossy(&seen).contains("event: end") {
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(n > 0, "closed without an end event");
            seen.extend_from_slice(&buffer[..n]);
        }
    })
    .await
    .expect("the stream ends after sign out");
    assert!(String::from_utf8_lossy(&seen).contains("UNAUTHENTICATED"));
}

#[tokio::test]
async fn only_an_admin_reads_the_tenant_page_and_resets_a_breaker() {
    let app = TestApp::spawn().await;
    let console = Console::of(&app);
    let json = ("Content-Type", "application/json");
    let body = r#"{"operator":"user_42"}"#;
    for role in [Role::Oncall, Role::Auditor, Role::Coordinator] {
        let (session, csrf) = console.session(&app.key("acme", role).await).await;
        assert_eq!(
            console.get("/api/tenant", &session).await.status,
            403,
            "{role}"
        );
        let refused = http(
            console.addr,
            "POST",
            "/api/breakers/reset",
            &[("Cookie", &session), ("X-CSRF-Token", &csrf), json],
            body,
        )
        .await;
        assert_eq!(refused.status, 403, "{role}: {}", refused.body);
        assert_eq!(refused.json()["code"], "PERMISSION_DENIED");
    }
    let (admin, csrf) = console.session(&app.key("acme", Role::Admin).await).await;
    let tenant = console.get("/api/tenant", &admin).await;
    assert_eq!(tenant.status, 200, "{}", tenant.body);
    assert_eq!(tenant.json()["breakers"], serde_json::json!([]));
    // No reviewers run: a submitted proposal waits in the queue, and the page
    // shows it once the queue sampler (every few seconds) has seen it.
    app.submit_id(&app.key("acme", Role::Coordinator).await, valid_spec())
        .await;
    let queue = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let tenant = console.get("/api/tenant", &admin).await.json();
            if tenant["queue"]["depth"] == 1 {
                return tenant["queue"].clone();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the queue's depth on the tenant page");
    assert!(
        queue["sampled_at"].as_i64().is_some_and(|at| at > 0),
        "{queue}"
    );
    assert!(queue["oldest_age_ms"].is_u64(), "{queue}");
    let reset = http(
        console.addr,
        "POST",
        "/api/breakers/reset",
        &[("Cookie", &admin), ("X-CSRF-Token", &csrf), json],
        body,
    )
    .await;
    assert_eq!(reset.status, 204, "{}", reset.body);
    let resets = app.store.breaker_resets(0).await.unwrap();
    assert_eq!(
        resets
            .iter()
            .map(|r| (r.tenant.as_str(), r.operator.as_str()))
            .collect::<Vec<_>>(),
        [("acme", "user_42")]
    );
}

/// The stream from `last_event_id` on, read until `until` appears.
async fn read_stream(addr: SocketAddr, cookie: &str, last_event_id: &str, until: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /api/stream HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nLast-Event-ID: {last_event_id}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    tokio::time::timeout(WAIT, async {
        while !String::from_utf8_lossy(&seen).contains(until) {
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(
                n > 0,
                "the stream ended: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buffer[..n]);
        }
    })
    .await
    .expect("the event in time");
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("content-type: text/event-stream"), "{text}");
    text
}
