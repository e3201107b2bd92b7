use std::num::NonZeroU32;

use countersign_api::RateLimit;
use countersign_domain::Role;
use tonic::Code;

use crate::helpers::{TestApp, valid_spec};

#[tokio::test]
async fn a_tenant_past_its_bucket_is_refused_while_others_are_served() {
    let app = TestApp::spawn_with(|c| {
        c.rate_limit = RateLimit {
            per_second: NonZeroU32::new(1).unwrap(),
            burst: NonZeroU32::new(3).unwrap(),
        }
    })
    .await;
    let noisy = app.key("noisy", Role::Coordinator).await;
    let quiet = app.key("quiet", Role::Coordinator).await;
    for _ in 0..3 {
        app.submit(&noisy, valid_spec())
            .await
            .expect("within the burst");
    }
    // The bucket refills one token a second; however slow this machine is,
    // twenty more calls in a row run it dry.
    let mut refused = None;
    for _ in 0..20 {
        if let Err(status) = app.submit(&noisy, valid_spec()).await {
            refused = Some(status);
            break;
        }
    }
    let status = refused.expect("a flooding tenant is refused");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("noisy"), "{status:?}");
    app.submit(&quiet, valid_spec())
        .await
        .expect("another tenant has its own bucket");
}
