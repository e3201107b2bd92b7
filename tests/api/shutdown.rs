//! Graceful shutdown of the real binary (SQLite, the default): SIGTERM with a
//! `Watch` open and proposals in flight. Health turns NOT_SERVING, the stream
//! ends UNAVAILABLE naming the cursor to resume from, the process exits 0
//! within the grace period, and after a restart on the same data every
//! accepted proposal is decided exactly once while the resumed stream carries
//! on from the hint with no gap and no duplicate.

use std::{
    collections::HashMap,
    path::Path,
    time::{Duration, Instant},
};

use countersign::client::BearerAuth;
use countersign_proto::v1::{
    AwaitDecisionRequest, EventKind, Notification, SubmitRequest, WatchRequest,
    notification_service_client::NotificationServiceClient,
    proposal_service_client::ProposalServiceClient,
};
use tokio_stream::StreamExt;
use tonic::{
    Code, Status,
    service::interceptor::InterceptedService,
    transport::{Channel, Endpoint},
};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use crate::{
    binary::{Server, serve_with},
    helpers::valid_spec,
};

const GRACE: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_secs(30);

type Proposals = ProposalServiceClient<InterceptedService<Channel, BearerAuth>>;
type Notifications = NotificationServiceClient<InterceptedService<Channel, BearerAuth>>;

fn serve(dir: &Path) -> Server {
    serve_with(
        dir,
        &[
            "--shutdown-grace",
            "10s",
            "--reviewers",
            "2",
            "--watch-heartbeat",
            "300ms",
        ],
    )
}

async fn connect(server: &Server, dir: &Path) -> (Proposals, Notifications, Channel) {
    let key = std::fs::read_to_string(dir.join("countersign-data/admin.key")).unwrap();
    let auth = BearerAuth::new(key.trim()).unwrap();
    let channel = Endpoint::from_shared(server.endpoint.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    (
        ProposalServiceClient::with_interceptor(channel.clone(), auth.clone()),
        NotificationServiceClient::with_interceptor(channel.clone(), auth),
        channel,
    )
}

/// Reads a stream until it ends; the notifications it delivered (heartbeats
/// left out) and how it ended.
async fn drain(
    mut stream: tonic::Streaming<Notification>,
) -> (Vec<Notification>, Option<u64>, Option<Status>) {
    let mut seen = Vec::new();
    let mut last_cursor = None;
    loop {
        match tokio::time::timeout(WAIT, stream.message()).await {
            Err(_) => panic!("the stream neither delivered nor ended in {WAIT:?}"),
            Ok(Ok(Some(n))) => {
                last_cursor = Some(n.cursor);
                if !n.heartbeat {
                    seen.push(n);
                }
            }
            Ok(Ok(None)) => return (seen, last_cursor, None),
            Ok(Err(status)) => return (seen, last_cursor, Some(status)),
        }
    }
}

/// Events of a stream up to its first heartbeat (the end of what is stored).
async fn until_idle(client: &mut Notifications, after: u64) -> Vec<Notification> {
    let mut stream = client
        .watch(WatchRequest {
            after_cursor: Some(after),
            ..WatchRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    loop {
        let n = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("a heartbeat once idle")
            .unwrap()
            .expect("the stream stays open");
        if n.heartbeat {
            return seen;
        }
        seen.push(n);
    }
}

fn key_of(n: &Notification) -> (u64, String, i32) {
    let id = n
        .proposal
        .as_ref()
        .map(|p| p.id.clone())
        .unwrap_or_default();
    (n.cursor, id, n.event)
}

fn is_terminal(event: i32) -> bool {
    matches!(
        EventKind::try_from(event),
        Ok(EventKind::Approved | EventKind::Rejected | EventKind::Cancelled | EventKind::TimedOut)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_watch_with_a_resume_cursor_exits_within_the_grace_and_a_restart_loses_nothing()
 {
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(dir.path());
    let (proposals, mut notifications, channel) = connect(&server, dir.path()).await;

    // A health watch: the status change is observable on an open stream.
    let mut health = HealthClient::new(channel.clone())
        .watch(HealthCheckRequest {
            service: "countersign.v1.ProposalService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = health.next().await.unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);

    let watch = notifications
        .watch(WatchRequest {
            after_cursor: Some(0),
            ..WatchRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    let watcher = tokio::spawn(drain(watch));

    // Proposals in flight: submitters keep going until the server refuses.
    let mut submitters = Vec::new();
    for submitter in 0..4 {
        let mut client = proposals.clone();
        submitters.push(tokio::spawn(async move {
            let mut accepted = Vec::new();
            for n in 0..200 {
                // Each one different: no retry suppression, no breaker.
                let mut spec = valid_spec();
                spec.target = format!("host-{submitter}-{n}");
                spec.operator = format!("op-{submitter}-{n}");
                let request = SubmitRequest {
                    spec: Some(spec),
                    ..Default::default()
                };
                match client.submit(request).await {
                    Ok(response) => accepted.push(response.into_inner().proposal.unwrap().id),
                    Err(_) => break,
                }
            }
            accepted
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    let pid = server.child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );

    let change = tokio::time::timeout(WAIT, health.next())
        .await
        .expect("health changes at once")
        .expect("health stream open")
        .unwrap();
    assert_eq!(change.status, ServingStatus::NotServing as i32);
    drop(health);

    let (before, last_cursor, end) = watcher.await.unwrap();
    let end = end.expect("the stream ends with a status");
    assert_eq!(end.code(), Code::Unavailable, "{end:?}");
    let hint: u64 = end
        .message()
        .strip_prefix("server shutting down; resume from cursor ")
        .unwrap_or_else(|| panic!("a resume hint: {:?}", end.message()))
        .parse()
        .unwrap();
    // The last cursor this stream delivered: resuming from it loses nothing.
    assert_eq!(hint, last_cursor.unwrap_or(0));

    let mut accepted = Vec::new();
    for submitter in submitters {
        accepted.extend(submitter.await.unwrap());
    }
    assert!(!accepted.is_empty(), "some proposals were accepted");

    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < GRACE + Duration::from_secs(2),
            "serve still running after the grace period"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "exit 0 after SIGTERM: {status:?}");
    drop(server);

    // Restart on the same data: every accepted proposal is decided.
    let server = serve(dir.path());
    let (mut proposals, mut notifications, _) = connect(&server, dir.path()).await;
    for id in &accepted {
        let mut request = tonic::Request::new(AwaitDecisionRequest { id: id.clone() });
        request.set_timeout(WAIT);
        let decided = proposals
            .await_decision(request)
            .await
            .unwrap()
            .into_inner();
        assert!(decided.decision.is_some(), "{id} decided");
    }

    // Resumed from the hint, then the whole log: the stream before the
    // signal and the resumed one are exactly the log, in order.
    let resumed = until_idle(&mut notifications, hint).await;
    let full = until_idle(&mut notifications, 0).await;
    let joined: Vec<_> = before.iter().chain(&resumed).map(key_of).collect();
    let log: Vec<_> = full.iter().map(key_of).collect();
    assert!(
        log.len() >= joined.len() && log[..joined.len()] == joined[..],
        "no gap, no duplicate: {} before + {} resumed vs {} in the log",
        before.len(),
        resumed.len(),
        log.len()
    );

    // Exactly one decision each.
    let mut endings: HashMap<&str, usize> = HashMap::new();
    for n in &full {
        if is_terminal(n.event) {
            let id = n.proposal.as_ref().unwrap().id.as_str();
            *endings.entry(id).or_default() += 1;
        }
    }
    for id in &accepted {
        assert_eq!(endings.get(id.as_str()), Some(&1), "{id} decided once");
    }
    drop(server);
}
