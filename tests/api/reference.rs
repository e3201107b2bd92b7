//! SopService and TargetService: admins write, every role reads, per tenant.

use countersign_domain::Role;
use countersign_proto::v1::{
    self, GetSopRequest, ListSopsRequest, ListTargetsRequest, PutSopRequest, PutTargetRequest,
    RetireSopRequest, sop_service_client::SopServiceClient,
    target_service_client::TargetServiceClient,
};
use tonic::Code;

use countersign_test_support::fixtures::wire_sop as sop;

use crate::helpers::{TestApp, assert_code};

async fn sops(
    app: &TestApp,
    key: &str,
) -> SopServiceClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        countersign::client::BearerAuth,
    >,
> {
    SopServiceClient::with_interceptor(
        app.channel().await,
        countersign::client::BearerAuth::new(key).unwrap(),
    )
}

#[tokio::test]
async fn each_put_bumps_the_version_and_retire_is_a_version_too() {
    let app = TestApp::spawn().await;
    let admin = app.key("acme", Role::Admin).await;
    let mut client = sops(&app, &admin).await;
    let v1 = client
        .put_sop(PutSopRequest {
            sop: Some(sop("SOP-007")),
        })
        .await
        .unwrap()
        .into_inner();
    let v2 = client
        .put_sop(PutSopRequest {
            sop: Some(sop("SOP-007")),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((v1.version, v2.version), (1, 2));
    let retired = client
        .retire_sop(RetireSopRequest {
            id: "SOP-007".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(retired.retired);
    assert_eq!(retired.version, 3);
    let active = client
        .list_sops(ListSopsRequest {
            include_retired: false,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(active.sops.is_empty());
    let all = client
        .list_sops(ListSopsRequest {
            include_retired: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.sops.len(), 1);
}

#[tokio::test]
async fn only_admins_write_reference_data_and_every_role_reads_it() {
    let app = TestApp::spawn().await;
    let admin = app.key("acme", Role::Admin).await;
    sops(&app, &admin)
        .await
        .put_sop(PutSopRequest {
            sop: Some(sop("SOP-1")),
        })
        .await
        .unwrap();
    for role in [Role::Coordinator, Role::Oncall, Role::Auditor] {
        let key = app.key("acme", role).await;
        let mut client = sops(&app, &key).await;
        assert_code(
            client
                .put_sop(PutSopRequest {
                    sop: Some(sop("SOP-2")),
                })
                .await,
            Code::PermissionDenied,
        );
        assert_code(
            client
                .retire_sop(RetireSopRequest { id: "SOP-1".into() })
                .await,
            Code::PermissionDenied,
        );
        assert_eq!(
            client
                .get_sop(GetSopRequest { id: "SOP-1".into() })
                .await
                .unwrap()
                .into_inner()
                .version,
            1
        );
        let mut targets = TargetServiceClient::with_interceptor(
            app.channel().await,
            countersign::client::BearerAuth::new(&key).unwrap(),
        );
        let target = v1::Target {
            id: "node-01".into(),
            status: v1::TargetStatus::Online as i32,
            ..Default::default()
        };
        assert_code(
            targets
                .put_target(PutTargetRequest {
                    target: Some(target),
                })
                .await,
            Code::PermissionDenied,
        );
    }
}

#[tokio::test]
async fn another_tenants_sop_is_not_found() {
    let app = TestApp::spawn().await;
    let a = app.key("tenant-a", Role::Admin).await;
    let b = app.key("tenant-b", Role::Admin).await;
    sops(&app, &a)
        .await
        .put_sop(PutSopRequest {
            sop: Some(sop("SOP-A")),
        })
        .await
        .unwrap();
    let mut client_b = sops(&app, &b).await;
    assert_code(
        client_b.get_sop(GetSopRequest { id: "SOP-A".into() }).await,
        Code::NotFound,
    );
    assert_code(
        client_b
            .retire_sop(RetireSopRequest { id: "SOP-A".into() })
            .await,
        Code::NotFound,
    );
    assert!(
        client_b
            .list_sops(ListSopsRequest {
                include_retired: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .sops
            .is_empty()
    );
}

#[tokio::test]
async fn bad_sops_and_targets_name_the_field() {
    let app = TestApp::spawn().await;
    let admin = app.key("acme", Role::Admin).await;
    let mut client = sops(&app, &admin).await;
    let cases: Vec<(&str, v1::Sop)> = vec![
        (
            "sop.id",
            v1::Sop {
                id: String::new(),
                ..sop("x")
            },
        ),
        (
            "sop.id",
            v1::Sop {
                id: "SOP 7".into(),
                ..sop("x")
            },
        ),
        (
            "sop.action",
            v1::Sop {
                action: "Restart!".into(),
                ..sop("x")
            },
        ),
        (
            "sop.title",
            v1::Sop {
                title: String::new(),
                ..sop("x")
            },
        ),
        (
            "sop.max_blast_radius",
            v1::Sop {
                max_blast_radius: 0,
                ..sop("x")
            },
        ),
        (
            "sop.id",
            v1::Sop {
                id: "SOP-7\nINFO forged".into(),
                ..sop("x")
            },
        ),
        (
            "sop.selector[env]",
            v1::Sop {
                selector: [("env".to_owned(), "\u{1b}[31mproduction".to_owned())].into(),
                ..sop("x")
            },
        ),
        (
            "sop.selector",
            v1::Sop {
                selector: [("env\r\n".to_owned(), "production".to_owned())].into(),
                ..sop("x")
            },
        ),
    ];
    for (field, bad) in cases {
        let status = assert_code(
            client.put_sop(PutSopRequest { sop: Some(bad) }).await,
            Code::InvalidArgument,
        );
        assert!(status.message().starts_with(field), "{field}: {status:?}");
    }
    let mut targets = TargetServiceClient::with_interceptor(
        app.channel().await,
        countersign::client::BearerAuth::new(&admin).unwrap(),
    );
    let status = assert_code(
        targets
            .put_target(PutTargetRequest {
                target: Some(v1::Target {
                    id: "n".into(),
                    ..Default::default()
                }),
            })
            .await,
        Code::InvalidArgument,
    );
    assert!(status.message().starts_with("target.status"), "{status:?}");
    let status = assert_code(
        targets
            .put_target(PutTargetRequest {
                target: Some(v1::Target {
                    id: String::new(),
                    status: 1,
                    ..Default::default()
                }),
            })
            .await,
        Code::InvalidArgument,
    );
    assert!(status.message().starts_with("target.id"), "{status:?}");
    let unprintable = [
        ("target.id", "node-01\nINFO forged", "env", "production"),
        ("target.labels", "node-01", "env\u{1b}[0m", "production"),
        ("target.labels[env]", "node-01", "env", "prod\u{2028}uction"),
    ];
    for (field, id, key, value) in unprintable {
        let status = assert_code(
            targets
                .put_target(PutTargetRequest {
                    target: Some(v1::Target {
                        id: id.into(),
                        status: v1::TargetStatus::Online as i32,
                        labels: [(key.to_owned(), value.to_owned())].into(),
                        ..Default::default()
                    }),
                })
                .await,
            Code::InvalidArgument,
        );
        assert!(
            status.message().starts_with(&format!("{field}:")),
            "{field}: {status:?}"
        );
    }
}

/// Puts `n` targets `t-000`… of about 25 KB each (64 labels at their limits).
async fn put_large_targets(app: &TestApp, tenant: &str, n: usize) -> Vec<String> {
    let labels: std::collections::BTreeMap<String, String> = (0..64)
        .map(|i| (format!("{i:0>128}"), "v".repeat(256)))
        .collect();
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("t-{i:03}");
        app.store
            .put_target(
                tenant,
                &id,
                countersign_domain::TargetStatus::Online,
                labels.clone(),
            )
            .await
            .unwrap();
        ids.push(id);
    }
    ids
}

#[tokio::test]
async fn targets_and_sops_are_listed_in_pages_that_fit_a_message() {
    let app = TestApp::spawn().await;
    let reader = app.key("acme", Role::Auditor).await;
    // 6 MB of targets: more than one 4 MiB message could carry.
    let ids = put_large_targets(&app, "acme", 250).await;
    let mut targets = TargetServiceClient::with_interceptor(
        app.channel().await,
        countersign::client::BearerAuth::new(&reader).unwrap(),
    );
    let mut listed = Vec::new();
    let mut pages = 0;
    let mut page_token = String::new();
    loop {
        let page = targets
            .list_targets(ListTargetsRequest {
                page_size: 1_000,
                page_token,
            })
            .await
            .expect("every page fits a message")
            .into_inner();
        pages += 1;
        assert!(!page.targets.is_empty());
        listed.extend(page.targets.into_iter().map(|t| t.id));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    assert_eq!(listed, ids, "every target once, in id order");
    assert!(pages > 1, "{pages} pages");

    // A page size is honoured when the page is small enough.
    let page = targets
        .list_targets(ListTargetsRequest {
            page_size: 7,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.targets.len(), 7);
    let next = targets
        .list_targets(ListTargetsRequest {
            page_size: 7,
            page_token: page.next_page_token.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.targets[0].id, "t-007");

    // Bad sizes and tokens name their field; a token of the other list is refused.
    let status = assert_code(
        targets
            .list_targets(ListTargetsRequest {
                page_size: 1_001,
                page_token: String::new(),
            })
            .await,
        Code::InvalidArgument,
    );
    assert!(status.message().starts_with("page_size:"), "{status:?}");
    let mut sop_client = sops(&app, &reader).await;
    for bad in ["not hex", "abcd", page.next_page_token.as_str()] {
        let status = assert_code(
            sop_client
                .list_sops(ListSopsRequest {
                    page_token: bad.into(),
                    ..Default::default()
                })
                .await,
            Code::InvalidArgument,
        );
        assert!(status.message().starts_with("page_token:"), "{status:?}");
    }
    let status = assert_code(
        targets
            .list_targets(ListTargetsRequest {
                page_size: 0,
                page_token: "zz".into(),
            })
            .await,
        Code::InvalidArgument,
    );
    assert!(status.message().starts_with("page_token:"), "{status:?}");
}

#[tokio::test]
async fn sops_are_listed_in_pages_with_or_without_the_retired() {
    let app = TestApp::spawn().await;
    let admin = app.key("acme", Role::Admin).await;
    let mut client = sops(&app, &admin).await;
    for i in 0..25 {
        client
            .put_sop(PutSopRequest {
                sop: Some(sop(&format!("SOP-{i:02}"))),
            })
            .await
            .unwrap();
    }
    client
        .retire_sop(RetireSopRequest {
            id: "SOP-03".into(),
        })
        .await
        .unwrap();
    for include_retired in [true, false] {
        let mut listed = Vec::new();
        let mut page_token = String::new();
        loop {
            let page = client
                .list_sops(ListSopsRequest {
                    include_retired,
                    page_size: 10,
                    page_token,
                })
                .await
                .unwrap()
                .into_inner();
            assert!(page.sops.len() <= 10);
            listed.extend(page.sops.into_iter().map(|s| s.id));
            if page.next_page_token.is_empty() {
                break;
            }
            page_token = page.next_page_token;
        }
        let expected: Vec<String> = (0..25)
            .map(|i| format!("SOP-{i:02}"))
            .filter(|id| include_retired || id != "SOP-03")
            .collect();
        assert_eq!(listed, expected, "include_retired: {include_retired}");
    }
}

#[tokio::test]
async fn the_cli_lists_every_target_and_sop_across_pages() {
    let app = TestApp::spawn().await;
    let admin = app.key("acme", Role::Admin).await;
    let ids = put_large_targets(&app, "acme", 120).await;
    let mut client = sops(&app, &admin).await;
    for i in 0..3 {
        client
            .put_sop(PutSopRequest {
                sop: Some(sop(&format!("SOP-{i}"))),
            })
            .await
            .unwrap();
    }
    let endpoint = app.endpoint();
    let run = move |args: &'static [&'static str]| {
        let (endpoint, admin) = (endpoint.clone(), admin.clone());
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_countersign"))
                .args(args)
                .args(["--endpoint", &endpoint, "--api-key", &admin, "--json"])
                .env_remove("COUNTERSIGN_API_KEY")
                .env_remove("COUNTERSIGN_API_KEY_FILE")
                .output()
                .unwrap()
        })
    };
    let output = run(&["target", "list"]).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed: Vec<String> = stdout
        .lines()
        .map(|line| {
            let target: serde_json::Value = serde_json::from_str(line).unwrap();
            target["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(listed, ids, "every target, over more than one page");
    let output = run(&["sop", "list"]).await.unwrap();
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 3);
}
