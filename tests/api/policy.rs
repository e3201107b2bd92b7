//! Routes through `PolicyService`, on both backends: admins alone manage
//! them, bad ones are refused naming the field, and what they send to people
//! (read literally: every failed gate named), re-checked at the final
//! approval.

use countersign_domain::{Role, TargetStatus};
use countersign_proto::v1::{
    self, DeleteRouteRequest, EventKind, ListRoutesRequest, ProposalState, PutRouteRequest,
};
use countersign_test_support::fixtures::{production, wire_spec_on};
use tonic::Code;

use crate::{
    escalation_support::{
        Backend, Scene, TENANT, expiring, human_gate, on_both_backends, person_key, policy,
        put_route, route, state, until_event, wait_for,
    },
    helpers::assert_code,
};

on_both_backends!(
    admins_alone_put_list_and_delete_routes_within_their_tenant,
    a_route_is_refused_naming_the_field_it_breaks,
    putting_a_route_drops_the_cached_rejections_it_would_now_escalate,
    escalate_on_is_read_literally_and_never_covers_an_offline_target,
    the_final_approval_rejects_when_the_target_moved_meanwhile,
    an_escalated_proposal_blocks_an_overlapping_one_like_a_pending_one,
    where_several_routes_match_the_strictest_applies_and_the_decision_names_it,
    the_final_approval_rejects_when_the_sop_changed_meanwhile,
);

async fn admins_alone_put_list_and_delete_routes_within_their_tenant(backend: Backend) {
    let env = backend.start().await;
    let app = &env.app;
    let admin = app.key(TENANT, Role::Admin).await;
    let mut client = policy(app, &admin).await;
    let stored = put_route(app, &admin, route("prod", 2)).await;
    assert_eq!(stored.approvals_required, 2);
    // Defaults are applied and shown.
    assert_eq!(stored.approver_roles, ["oncall", "admin"]);
    let mut replaced = route("prod", 3);
    replaced.approver_roles = vec!["coordinator".into()];
    put_route(app, &admin, replaced).await;
    put_route(app, &admin, route("other", 1)).await;
    let listed = client
        .list_routes(ListRoutesRequest {})
        .await
        .unwrap()
        .into_inner()
        .routes;
    let ids: Vec<(&str, u32)> = listed
        .iter()
        .map(|r| (r.id.as_str(), r.approvals_required))
        .collect();
    assert_eq!(ids, [("other", 1), ("prod", 3)]);

    for role in [Role::Coordinator, Role::Oncall, Role::Auditor] {
        let key = person_key(app, TENANT, role, Some("ann@example.com"), false).await;
        let mut theirs = policy(app, &key).await;
        let put = theirs
            .put_route(PutRouteRequest {
                route: Some(route("mine", 1)),
            })
            .await;
        assert_code(put, Code::PermissionDenied);
        assert_code(
            theirs.list_routes(ListRoutesRequest {}).await,
            Code::PermissionDenied,
        );
        assert_code(
            theirs
                .delete_route(DeleteRouteRequest { id: "prod".into() })
                .await,
            Code::PermissionDenied,
        );
    }

    // Another tenant's admin sees none of them and cannot delete them.
    let stranger = app.key("globex", Role::Admin).await;
    let mut theirs = policy(app, &stranger).await;
    let none = theirs
        .list_routes(ListRoutesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(none.routes.is_empty(), "{none:?}");
    assert_code(
        theirs
            .delete_route(DeleteRouteRequest { id: "prod".into() })
            .await,
        Code::NotFound,
    );

    let deleted = client
        .delete_route(DeleteRouteRequest { id: "prod".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deleted.approvals_required, 3);
    let status = assert_code(
        client
            .delete_route(DeleteRouteRequest { id: "prod".into() })
            .await,
        Code::NotFound,
    );
    assert!(status.message().contains("prod"), "{status:?}");
    let left = client
        .list_routes(ListRoutesRequest {})
        .await
        .unwrap()
        .into_inner()
        .routes;
    assert_eq!(left.len(), 1);
}

async fn a_route_is_refused_naming_the_field_it_breaks(backend: Backend) {
    let env = backend.start().await;
    let app = &env.app;
    let admin = app.key(TENANT, Role::Admin).await;
    let mut client = policy(app, &admin).await;
    let cases: Vec<(v1::Route, &str)> = vec![
        (route("zero", 0), "route.approvals_required"),
        (route("", 1), "route.id"),
        (
            v1::Route {
                escalate_on: vec!["target_state".into()],
                ..route("r", 1)
            },
            "route.escalate_on",
        ),
        (
            v1::Route {
                escalate_on: vec!["no_parallel_operation".into()],
                ..route("r", 1)
            },
            "route.escalate_on",
        ),
        (
            v1::Route {
                approver_roles: vec!["auditor".into()],
                ..route("r", 1)
            },
            "route.approver_roles",
        ),
        (
            v1::Route {
                expires_after: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 0,
                }),
                ..route("r", 1)
            },
            "route.expires_after",
        ),
        (
            v1::Route {
                r#match: Some(v1::RouteMatch {
                    actions: vec!["DROP TABLE".into()],
                    ..Default::default()
                }),
                ..route("r", 1)
            },
            "route.match.actions",
        ),
    ];
    for (bad, field) in cases {
        let status = assert_code(
            client
                .put_route(PutRouteRequest {
                    route: Some(bad.clone()),
                })
                .await,
            Code::InvalidArgument,
        );
        assert!(
            status.message().starts_with(&format!("{field}:")),
            "{bad:?}: {status:?}"
        );
    }
    let status = assert_code(
        client.put_route(PutRouteRequest { route: None }).await,
        Code::InvalidArgument,
    );
    assert!(status.message().starts_with("route:"), "{status:?}");
    let listed = client
        .list_routes(ListRoutesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        listed.routes.is_empty(),
        "nothing refused was stored: {listed:?}"
    );
}

/// A route that sends operations without an SOP to people: all three gates
/// a missing SOP fails.
fn no_sop_route(escalate_on: &[&str]) -> v1::Route {
    v1::Route {
        r#match: Some(v1::RouteMatch {
            actions: vec!["db_*".into()],
            ..Default::default()
        }),
        escalate_on: escalate_on.iter().map(|g| (*g).to_owned()).collect(),
        ..route("no-sop", 1)
    }
}

/// A failover of `target`, which no SOP covers.
fn failover(target: &str) -> v1::ProposalSpec {
    v1::ProposalSpec {
        action: "db_failover".into(),
        ..wire_spec_on(target)
    }
}

async fn putting_a_route_drops_the_cached_rejections_it_would_now_escalate(backend: Backend) {
    let scene = Scene::new(backend, route("r", 1)).await;
    let app = scene.app();
    scene.target("db-1").await;
    let mut stream = scene.watch_live(&scene.admin).await;
    let first = app.submit_id(&scene.sam, failover("db-1")).await;
    until_event(&mut stream, &first, EventKind::Rejected).await;
    // The same call again is answered from the cache…
    let again = app.submit(&scene.sam, failover("db-1")).await.unwrap();
    assert!(again.suppressed, "{again:?}");
    // …until a route would send it to people.
    put_route(
        app,
        &scene.admin,
        no_sop_route(&["sop", "rollback", "blast_radius"]),
    )
    .await;
    let retry = app.submit(&scene.sam, failover("db-1")).await.unwrap();
    assert!(!retry.suppressed, "{retry:?}");
    let id = retry.proposal.unwrap().id;
    let escalated = wait_for(app, &scene.sam, &id, ProposalState::Escalated).await;
    assert_eq!(escalated.decision.unwrap().route_id, "no-sop");
}

async fn escalate_on_is_read_literally_and_never_covers_an_offline_target(backend: Backend) {
    let scene = Scene::new(backend, route("r", 1)).await;
    let app = scene.app();
    for target in ["db-1", "db-2", "db-3"] {
        scene.target(target).await;
    }
    app.store
        .put_target(TENANT, "db-3", TargetStatus::Offline, production())
        .await
        .unwrap();

    // Only `sop` named: the other gates a missing SOP fails still reject.
    put_route(app, &scene.admin, no_sop_route(&["sop"])).await;
    let partial = app.submit_id(&scene.sam, failover("db-1")).await;
    let partial = scene.decided(&partial).await;
    assert_eq!(state(&partial), ProposalState::Rejected, "{partial:?}");
    assert!(
        partial.decision.as_ref().unwrap().route_id.is_empty(),
        "{partial:?}"
    );

    // All three named: it waits for people.
    put_route(
        app,
        &scene.admin,
        no_sop_route(&["sop", "rollback", "blast_radius"]),
    )
    .await;
    let escalated = app.submit_id(&scene.sam, failover("db-2")).await;
    wait_for(app, &scene.sam, &escalated, ProposalState::Escalated).await;

    // An offline target is a fact no approval changes.
    let offline = app.submit_id(&scene.sam, failover("db-3")).await;
    let offline = scene.decided(&offline).await;
    assert_eq!(state(&offline), ProposalState::Rejected, "{offline:?}");
    assert!(
        offline
            .decision
            .as_ref()
            .unwrap()
            .missing_gates
            .contains(&"target_state".to_owned()),
        "{offline:?}"
    );
}

async fn the_final_approval_rejects_when_the_target_moved_meanwhile(backend: Backend) {
    let scene = Scene::new(backend, route("r", 2)).await;
    let id = scene.escalate("n1").await;
    scene.approve(&scene.ann, &id).await.unwrap();
    let mut labels = production();
    labels.insert("cluster".into(), "c-n1".into());
    scene
        .app()
        .store
        .put_target(TENANT, "n1", TargetStatus::Maintenance, labels)
        .await
        .unwrap();
    let decided = scene.approve(&scene.bob, &id).await.unwrap();
    assert_eq!(state(&decided), ProposalState::Rejected, "{decided:?}");
    let decision = decided.decision.unwrap();
    let human = decision.gates.iter().find(|g| g.gate == "human").unwrap();
    assert!(human.passed, "the people approved: {decision:?}");
    let moved = decision
        .gates
        .iter()
        .find(|g| g.gate == "target_state")
        .unwrap();
    assert!(!moved.passed, "{decision:?}");
    assert!(decision.reason.contains("target_state"), "{decision:?}");
}

async fn an_escalated_proposal_blocks_an_overlapping_one_like_a_pending_one(backend: Backend) {
    let scene = Scene::new(backend, route("r", 1)).await;
    let id = scene.escalate("n1").await;
    let mut later = wire_spec_on("n1");
    later.reason = "another restart".into();
    later.parameters = None;
    let later = scene.app().submit_id(&scene.sam, later).await;
    let later = scene.decided(&later).await;
    assert_eq!(state(&later), ProposalState::Rejected, "{later:?}");
    let gate = later
        .decision
        .unwrap()
        .gates
        .into_iter()
        .find(|g| g.gate == "no_parallel_operation")
        .unwrap();
    assert!(!gate.passed && gate.detail.contains(&id), "{gate:?}");
}

/// Of the routes that match, the one with the most approvals applies, and of
/// those the one expiring soonest: the escalation takes its terms and the
/// decision names it.
async fn where_several_routes_match_the_strictest_applies_and_the_decision_names_it(
    backend: Backend,
) {
    let hour = std::time::Duration::from_secs(3600);
    let scene = Scene::new(backend, expiring(route("lax", 1), hour)).await;
    for laxer in [
        expiring(route("strict", 2), hour),
        expiring(route("slower", 2), 3 * hour),
    ] {
        put_route(scene.app(), &scene.admin, laxer).await;
    }
    let id = scene.escalate("n1").await;
    let waiting = scene.app().get(&scene.sam, &id).await.unwrap();
    assert_eq!(waiting.decision.unwrap().route_id, "strict");
    let inbox = scene.inbox(&scene.ann).await;
    let open = inbox
        .iter()
        .find(|e| e.proposal.as_ref().unwrap().id == id)
        .unwrap();
    assert_eq!(
        (open.route_id.as_str(), open.approvals_required),
        ("strict", 2)
    );
    let (opened, expires) = (
        open.proposal.as_ref().unwrap().updated_at.unwrap(),
        open.expires_at.unwrap(),
    );
    let ms = |t: prost_types::Timestamp| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000;
    // Opened when the review ended, moments before the proposal moved.
    let left = ms(expires) - ms(opened);
    assert!(
        (3_590_000..=3_600_000).contains(&left),
        "{left} ms: {open:?}"
    );

    let one = scene.approve(&scene.ann, &id).await.unwrap();
    assert_eq!(state(&one), ProposalState::Escalated, "one of two: {one:?}");
    let decided = scene.approve(&scene.bob, &id).await.unwrap();
    assert_eq!(state(&decided), ProposalState::Approved, "{decided:?}");
    assert_eq!(decided.decision.as_ref().unwrap().route_id, "strict");
    assert!(
        human_gate(&decided).detail.contains("approved by ann"),
        "{decided:?}"
    );
}

async fn the_final_approval_rejects_when_the_sop_changed_meanwhile(backend: Backend) {
    let scene = Scene::new(backend, route("r", 2)).await;
    let id = scene.escalate("n1").await;
    scene.approve(&scene.ann, &id).await.unwrap();
    let mut sop = countersign_test_support::fixtures::sop();
    sop.rollback_path = "systemctl restart nginx --no-block".into();
    scene.app().store.put_sop(TENANT, sop).await.unwrap();
    let decided = scene.approve(&scene.bob, &id).await.unwrap();
    assert_eq!(state(&decided), ProposalState::Rejected, "{decided:?}");
    assert!(
        human_gate(&decided).passed,
        "the people approved: {decided:?}"
    );
    let decision = decided.decision.unwrap();
    let moved = decision.gates.iter().find(|g| g.gate == "sop").unwrap();
    assert!(
        !moved.passed && moved.detail.contains("SOP-007"),
        "{decision:?}"
    );
    assert!(decision.reason.contains("sop: "), "{decision:?}");
}
