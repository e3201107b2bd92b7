//! Model profiles through `PolicyService`, on both backends: admins alone
//! manage them, within their tenant; a profile names one of the endpoints
//! the server configures, never a URL; a bad one is refused naming its field;
//! putting one drops the tenant's cached rejections, as any policy change.

use std::{num::NonZeroUsize, time::Duration};

use countersign::config::{ModelEndpointSection, ModelSection};
use countersign_domain::Role;
use countersign_proto::v1::{
    self, DeleteModelProfileRequest, ListModelProfilesRequest, PutModelProfileRequest,
};
use countersign_test_support::{app::TestApp, fixtures::wire_spec_on};
use tonic::{Code, Status};

use crate::{
    escalation_support::{
        Backend, Env, Scene, TENANT, on_both_backends, person_key, policy, route, until_event,
    },
    helpers::{assert_code, test_reviewers},
};

on_both_backends!(
    admins_alone_put_list_and_delete_model_profiles_within_their_tenant,
    a_profile_names_a_configured_endpoint_and_never_a_url,
    a_server_without_model_endpoints_refuses_every_profile,
    a_profile_is_refused_naming_the_field_it_breaks,
    putting_a_profile_drops_the_tenants_cached_rejections,
);

/// The server's endpoints: `local` and `remote` (never called here).
fn endpoints() -> ModelSection {
    let endpoint = |name: &str| ModelEndpointSection {
        name: name.into(),
        base_url: "http://127.0.0.1:9".into(),
        model: "qwen2.5-7b-instruct".into(),
        api_key_env: None,
        api_key_file: None,
        timeout: Duration::from_secs(60),
        max_concurrency: NonZeroUsize::new(4).unwrap(),
        json_mode: true,
    };
    ModelSection {
        endpoints: vec![endpoint("remote"), endpoint("local")],
    }
}

async fn start(backend: Backend) -> Env {
    backend
        .start_with_models(test_reviewers(1), endpoints())
        .await
}

/// A profile on `local` with every match field set, escalating when unsure.
fn profile(id: &str) -> v1::ModelProfile {
    v1::ModelProfile {
        id: id.into(),
        r#match: Some(v1::RouteMatch {
            actions: vec!["db_*".into(), "host_?estart*".into()],
            classes: vec![
                v1::OperationClass::Write as i32,
                v1::OperationClass::Destructive as i32,
            ],
            blast_radii: vec![v1::BlastRadius::Cluster as i32],
            target_selector: [("env".to_owned(), "production".to_owned())].into(),
        }),
        endpoint: "local".into(),
        on_unsure: v1::OnUnsure::Escalate as i32,
        calls_per_minute: 30,
    }
}

async fn put(
    app: &TestApp,
    key: &str,
    profile: Option<v1::ModelProfile>,
) -> Result<v1::ModelProfile, Status> {
    policy(app, key)
        .await
        .put_model_profile(PutModelProfileRequest { profile })
        .await
        .map(|r| r.into_inner())
}

async fn list(app: &TestApp, key: &str) -> Result<Vec<v1::ModelProfile>, Status> {
    policy(app, key)
        .await
        .list_model_profiles(ListModelProfilesRequest {})
        .await
        .map(|r| r.into_inner().profiles)
}

async fn delete(app: &TestApp, key: &str, id: &str) -> Result<v1::ModelProfile, Status> {
    policy(app, key)
        .await
        .delete_model_profile(DeleteModelProfileRequest { id: id.into() })
        .await
        .map(|r| r.into_inner())
}

async fn admins_alone_put_list_and_delete_model_profiles_within_their_tenant(backend: Backend) {
    let env = start(backend).await;
    let app = &env.app;
    let admin = app.key(TENANT, Role::Admin).await;
    let stored = put(app, &admin, Some(profile("db"))).await.unwrap();
    assert_eq!(stored, profile("db"), "every match field as put");
    // An unset on_unsure is shown as the default it is.
    let bare = v1::ModelProfile {
        id: "all".into(),
        endpoint: "remote".into(),
        ..Default::default()
    };
    let all = put(app, &admin, Some(bare)).await.unwrap();
    assert_eq!(all.on_unsure, v1::OnUnsure::Reject as i32);
    let replaced = v1::ModelProfile {
        endpoint: "remote".into(),
        on_unsure: v1::OnUnsure::Reject as i32,
        calls_per_minute: 0,
        ..profile("db")
    };
    put(app, &admin, Some(replaced.clone())).await.unwrap();
    assert_eq!(
        list(app, &admin).await.unwrap(),
        [all.clone(), replaced.clone()],
        "by id"
    );

    for role in [Role::Coordinator, Role::Oncall, Role::Auditor] {
        let key = person_key(app, TENANT, role, Some("ann@example.com"), false).await;
        let refused = assert_code(
            put(app, &key, Some(profile("mine"))).await,
            Code::PermissionDenied,
        );
        assert!(refused.message().contains("model profiles"), "{refused:?}");
        assert_code(list(app, &key).await, Code::PermissionDenied);
        assert_code(delete(app, &key, "db").await, Code::PermissionDenied);
    }

    // Another tenant's admin sees none of them and cannot delete them.
    let stranger = app.key("globex", Role::Admin).await;
    assert!(list(app, &stranger).await.unwrap().is_empty());
    assert_code(delete(app, &stranger, "db").await, Code::NotFound);

    assert_eq!(delete(app, &admin, "db").await.unwrap(), replaced);
    let gone = assert_code(delete(app, &admin, "db").await, Code::NotFound);
    assert!(gone.message().contains("model profile `db`"), "{gone:?}");
    assert_code(delete(app, &admin, "").await, Code::InvalidArgument);
    assert_eq!(list(app, &admin).await.unwrap(), [all]);
}

async fn a_profile_names_a_configured_endpoint_and_never_a_url(backend: Backend) {
    let env = start(backend).await;
    let app = &env.app;
    let admin = app.key(TENANT, Role::Admin).await;
    for endpoint in [
        "gpt-4o",
        "LOCAL",
        "local ",
        "",
        "http://169.254.169.254/latest/meta-data/",
        "https://api.openai.com/v1",
        "http://127.0.0.1:9",
    ] {
        let wire = v1::ModelProfile {
            endpoint: endpoint.into(),
            ..profile("db")
        };
        let refused = assert_code(put(app, &admin, Some(wire)).await, Code::InvalidArgument);
        let message = refused.message();
        assert!(
            message.starts_with("profile.endpoint:")
                && message.contains("configured: local, remote"),
            "{endpoint:?}: {message}"
        );
    }
    assert!(list(app, &admin).await.unwrap().is_empty(), "nothing kept");
}

async fn a_server_without_model_endpoints_refuses_every_profile(backend: Backend) {
    let env = backend.start().await;
    let app = &env.app;
    let admin = app.key(TENANT, Role::Admin).await;
    let refused = assert_code(
        put(app, &admin, Some(profile("db"))).await,
        Code::InvalidArgument,
    );
    assert!(
        refused.message().starts_with("profile.endpoint:")
            && refused.message().contains("configures no model endpoints"),
        "{refused:?}"
    );
    assert!(list(app, &admin).await.unwrap().is_empty());
}

async fn a_profile_is_refused_naming_the_field_it_breaks(backend: Backend) {
    let env = start(backend).await;
    let app = &env.app;
    let admin = app.key(TENANT, Role::Admin).await;
    let matching = |m: fn(&mut v1::RouteMatch)| {
        let mut wire = profile("db");
        m(wire.r#match.as_mut().unwrap());
        wire
    };
    let cases: Vec<(Option<v1::ModelProfile>, &str)> = vec![
        (None, "profile: must be set"),
        (
            Some(v1::ModelProfile {
                id: String::new(),
                ..profile("db")
            }),
            "profile.id:",
        ),
        (
            Some(v1::ModelProfile {
                on_unsure: 7,
                ..profile("db")
            }),
            "profile.on_unsure:",
        ),
        (
            Some(matching(|m| {
                m.classes = vec![v1::OperationClass::Read as i32]
            })),
            "profile.match.classes:",
        ),
        (
            Some(matching(|m| m.classes = vec![0])),
            "profile.match.classes:",
        ),
        (
            Some(matching(|m| m.blast_radii = vec![42])),
            "profile.match.blast_radii:",
        ),
        (
            Some(matching(|m| m.actions = vec!["DB_*".into()])),
            "profile.match.actions:",
        ),
        (
            Some(matching(|m| {
                m.target_selector = [("env".to_owned(), "prod\nuction".to_owned())].into()
            })),
            "profile.match.target_selector",
        ),
    ];
    for (wire, named) in cases {
        let refused = assert_code(put(app, &admin, wire.clone()).await, Code::InvalidArgument);
        assert!(
            refused.message().starts_with(named),
            "{wire:?}: {refused:?}"
        );
    }
    assert!(list(app, &admin).await.unwrap().is_empty(), "nothing kept");
}

async fn putting_a_profile_drops_the_tenants_cached_rejections(backend: Backend) {
    let scene = Scene::on(start(backend).await, route("r", 1)).await;
    let app = scene.app();
    scene.target("db-1").await;
    // A failover, which no SOP covers: rejected.
    let failover = || v1::ProposalSpec {
        action: "db_failover".into(),
        ..wire_spec_on("db-1")
    };
    let mut stream = scene.watch_live(&scene.admin).await;
    let first = app.submit_id(&scene.sam, failover()).await;
    until_event(&mut stream, &first, v1::EventKind::Rejected).await;
    let again = app.submit(&scene.sam, failover()).await.unwrap();
    assert!(again.suppressed, "{again:?}");
    put(app, &scene.admin, Some(profile("db"))).await.unwrap();
    let retry = app.submit(&scene.sam, failover()).await.unwrap();
    assert!(!retry.suppressed, "{retry:?}");
    // Deleting it is a policy change too.
    let id = retry.proposal.unwrap().id;
    until_event(&mut stream, &id, v1::EventKind::Rejected).await;
    assert!(app.submit(&scene.sam, failover()).await.unwrap().suppressed);
    delete(app, &scene.admin, "db").await.unwrap();
    let after = app.submit(&scene.sam, failover()).await.unwrap();
    assert!(!after.suppressed, "{after:?}");
}
