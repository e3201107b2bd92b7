//! SopService and TargetService: admins write, every role reads, per tenant.

use countersign_domain::Role;
use countersign_proto::v1::{
    self, GetSopRequest, ListSopsRequest, PutSopRequest, PutTargetRequest, RetireSopRequest,
    sop_service_client::SopServiceClient, target_service_client::TargetServiceClient,
};
use tonic::Code;

use crate::helpers::{TestApp, assert_code};

fn sop(id: &str) -> v1::Sop {
    v1::Sop {
        id: id.into(),
        action: "host_restart_service".into(),
        title: "Restart".into(),
        rollback_path: "systemctl start nginx".into(),
        max_blast_radius: v1::BlastRadius::Cluster as i32,
        selector: [("env".to_owned(), "production".to_owned())].into(),
        ..Default::default()
    }
}

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
        })
        .await
        .unwrap()
        .into_inner();
    assert!(active.sops.is_empty());
    let all = client
        .list_sops(ListSopsRequest {
            include_retired: true,
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
                include_retired: true
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
}
