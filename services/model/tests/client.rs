//! The client against a local fake provider: every answer and every failure
//! becomes the outcome the contract names, the key goes only in the
//! Authorization header, and concurrency stays within the endpoint's limit.

use std::time::Duration;

use countersign_domain::model::{ModelVerdict, Prompt};
use countersign_model::{ApiKey, EndpointConfig, Failure, ModelOutcome, Models};
use countersign_test_support::fake_model::{Answer, FakeModel, refusing_base_url};

fn config(name: &str, base_url: String) -> EndpointConfig {
    EndpointConfig {
        name: name.into(),
        base_url,
        model: "fake-model".into(),
        api_key: ApiKey::None,
        timeout: Duration::from_millis(500),
        max_concurrency: 4,
        json_mode: true,
    }
}

fn prompt() -> Prompt {
    Prompt {
        system: "instructions".into(),
        user: "one proposal".into(),
    }
}

async fn outcome_of(answer: Answer) -> ModelOutcome {
    let fake = FakeModel::start(move |_| answer.clone()).await;
    let models = Models::new(vec![config("local", fake.base_url())]).unwrap();
    models.review("local", &prompt()).await.outcome
}

fn verdict(outcome: &ModelOutcome) -> Option<ModelVerdict> {
    match outcome {
        ModelOutcome::Replied(reply) => Some(reply.verdict),
        ModelOutcome::Failed(_) => None,
    }
}

#[tokio::test]
async fn each_answer_of_the_provider_becomes_its_outcome() {
    let approve = outcome_of(Answer::Completion(
        r#"{"verdict": "approve", "reason": "covered"}"#.into(),
    ))
    .await;
    assert_eq!(verdict(&approve), Some(ModelVerdict::Approve));
    let reject = outcome_of(Answer::Completion("Decision: reject\nnot covered".into())).await;
    assert_eq!(verdict(&reject), Some(ModelVerdict::Reject));
    let prose = outcome_of(Answer::Completion("Looks fine, approve.".into())).await;
    assert_eq!(verdict(&prose), Some(ModelVerdict::Unsure));

    let cases = [
        (
            Answer::Body("<html>gateway</html>".into()),
            Failure::Malformed,
        ),
        (
            Answer::Body(r#"{"choices": []}"#.into()),
            Failure::Malformed,
        ),
        (Answer::Status(429), Failure::ProviderError),
        (Answer::Status(500), Failure::ProviderError),
        (Answer::Status(302), Failure::ProviderError),
        (
            Answer::After(
                Duration::from_secs(3),
                Box::new(Answer::Completion(r#"{"verdict": "approve"}"#.into())),
            ),
            Failure::Timeout,
        ),
    ];
    for (answer, failure) in cases {
        let shown = format!("{answer:?}");
        assert_eq!(
            outcome_of(answer).await,
            ModelOutcome::Failed(failure),
            "{shown}"
        );
    }
}

#[tokio::test]
async fn a_refused_connection_and_an_unknown_endpoint_are_provider_errors() {
    let models = Models::new(vec![config("gone", refusing_base_url().await)]).unwrap();
    let review = models.review("gone", &prompt()).await;
    assert_eq!(review.outcome, ModelOutcome::Failed(Failure::ProviderError));
    let review = models.review("never-configured", &prompt()).await;
    assert_eq!(review.outcome, ModelOutcome::Failed(Failure::ProviderError));
}

#[tokio::test]
async fn the_request_carries_the_prompt_the_model_and_the_key_in_its_header_only() {
    let fake = FakeModel::start(|_| Answer::Completion(r#"{"verdict": "unsure"}"#.into())).await;
    // A variable cargo sets for every test process: the key is read from
    // the environment by name.
    let mut c = config("keyed", format!("{}/v1/", fake.base_url()));
    c.api_key = ApiKey::Env("CARGO_PKG_NAME".into());
    let models = Models::new(vec![c]).unwrap();
    let review = models.review("keyed", &prompt()).await;
    assert_eq!(review.model, "fake-model");
    assert_eq!(review.usage.prompt, 100);
    assert_eq!(review.usage.cached_prompt, 64);
    let received = fake.received();
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert_eq!(
        request.authorization.as_deref(),
        Some("Bearer countersign-model")
    );
    assert_eq!(request.body["model"], "fake-model");
    assert_eq!(request.body["messages"][0]["content"], "instructions");
    assert_eq!(request.body["response_format"]["type"], "json_object");
    assert!(!request.body.to_string().contains("countersign-model"));
}

#[tokio::test]
async fn a_key_file_is_read_and_a_missing_key_refuses_the_configuration() {
    let fake = FakeModel::start(|_| Answer::Completion(r#"{"verdict": "reject"}"#.into())).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("key");
    std::fs::write(&file, "  sk-file-456\n").unwrap();
    let mut c = config("filed", fake.base_url());
    c.api_key = ApiKey::File(file);
    let models = Models::new(vec![c]).unwrap();
    models.review("filed", &prompt()).await;
    assert_eq!(
        fake.received()[0].authorization.as_deref(),
        Some("Bearer sk-file-456")
    );

    let mut missing = config("missing", fake.base_url());
    missing.api_key = ApiKey::Env("COUNTERSIGN_TEST_MODEL_KEY_NEVER_SET".into());
    let err = Models::new(vec![missing]).err().expect("refused");
    assert!(
        err.to_string()
            .contains("COUNTERSIGN_TEST_MODEL_KEY_NEVER_SET"),
        "{err}"
    );
    let twice = Models::new(vec![
        config("a", fake.base_url()),
        config("a", fake.base_url()),
    ]);
    assert!(twice.err().expect("refused").to_string().contains("twice"));
}

#[tokio::test]
async fn no_more_requests_are_in_flight_than_the_endpoint_allows() {
    let fake = FakeModel::start(|_| {
        Answer::After(
            Duration::from_millis(100),
            Box::new(Answer::Completion(r#"{"verdict": "approve"}"#.into())),
        )
    })
    .await;
    let mut c = config("narrow", fake.base_url());
    c.max_concurrency = 2;
    c.timeout = Duration::from_secs(10);
    let models = Models::new(vec![c]).unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let models = models.clone();
        tasks.spawn(async move { models.review("narrow", &prompt()).await });
    }
    let mut answered = 0;
    while let Some(review) = tasks.join_next().await {
        assert_eq!(
            verdict(&review.unwrap().outcome),
            Some(ModelVerdict::Approve)
        );
        answered += 1;
    }
    assert_eq!(answered, 6);
    assert_eq!(fake.received().len(), 6);
    assert_eq!(fake.most_in_flight(), 2);
}
