use std::{io::Write, time::Duration};

use super::*;
use crate::config::{LogFormat, Role};

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

fn env(vars: &[(&str, &str)]) -> Vec<Setting> {
    vars.iter()
        .filter_map(|(name, value)| env_setting(name, value))
        .collect()
}

fn flag(name: &'static str, key: &str, value: &str) -> Setting {
    Setting {
        source: format!("flag {name}"),
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

fn error_of(result: anyhow::Result<Config>) -> String {
    format!("{:#}", result.expect_err("the configuration is refused"))
}

#[test]
fn nothing_given_is_the_built_in_defaults() {
    let config = load_from(None, Vec::new(), Vec::new()).unwrap();
    assert_eq!(config, Config::default());
    assert_eq!(config.metrics.listen.to_string(), "127.0.0.1:9464");
    assert_eq!(config.shutdown.grace, Duration::from_secs(30));
}

#[test]
fn a_flag_beats_the_environment_which_beats_the_file() {
    let toml = file("[review]\ndeadline = \"10s\"\nattempts = 7\n");
    let from_file = load_from(Some(toml.path()), Vec::new(), Vec::new()).unwrap();
    assert_eq!(from_file.review.deadline, Duration::from_secs(10));

    let vars = env(&[("COUNTERSIGN_REVIEW_DEADLINE", "20s")]);
    let from_env = load_from(Some(toml.path()), vars.clone(), Vec::new()).unwrap();
    assert_eq!(from_env.review.deadline, Duration::from_secs(20));
    assert_eq!(from_env.review.attempts, 7, "the file's other keys stay");

    let flags = vec![flag("--review-deadline", "review.deadline", "30s")];
    let from_flag = load_from(Some(toml.path()), vars, flags).unwrap();
    assert_eq!(from_flag.review.deadline, Duration::from_secs(30));
}

#[test]
fn the_helm_charts_keys_are_read_from_the_file() {
    let toml = file(
        r#"
listen = "0.0.0.0:50051"
role = "worker"
data_dir = "/var/lib/countersign"
[log]
format = "json"
[metrics]
listen = "0.0.0.0:9464"
[shutdown]
grace = "45s"
[database]
url = "postgres://app:pw@db/countersign"
pool = 8
[redis]
url = "redis://redis:6379/0"
prefix = "cs"
[review]
workers = 2
express_workers = 2
deadline = "60s"
attempts = 3
lease = "30s"
[watch]
retention = "7d"
"#,
    );
    let config = load_from(Some(toml.path()), Vec::new(), Vec::new()).unwrap();
    assert_eq!(config.listen.to_string(), "0.0.0.0:50051");
    assert_eq!(config.role, Role::Worker);
    assert_eq!(config.log.format, LogFormat::Json);
    assert_eq!(config.metrics.listen.to_string(), "0.0.0.0:9464");
    assert_eq!(config.shutdown.grace, Duration::from_secs(45));
    assert_eq!(config.database.pool, 8);
    assert_eq!(config.redis.prefix, "cs");
    assert_eq!(config.review.workers, Some(2));
    assert_eq!(config.review.express_workers, Some(2));
    assert_eq!(config.watch.retention, Duration::from_secs(7 * 86_400));
}

#[test]
fn an_unknown_key_in_the_file_is_refused_with_its_name_and_the_file() {
    let toml = file("[review]\ndeadlne = \"10s\"\n");
    let error = error_of(load_from(Some(toml.path()), Vec::new(), Vec::new()));
    assert!(error.contains("review.deadlne"), "{error}");
    assert!(
        error.contains(&toml.path().display().to_string()),
        "{error}"
    );
}

#[test]
fn an_unknown_top_level_key_or_section_in_the_file_is_refused() {
    let toml = file("listn = \"0.0.0.0:1\"\n");
    let error = error_of(load_from(Some(toml.path()), Vec::new(), Vec::new()));
    assert!(error.contains("listn"), "{error}");
    let toml = file("[reviews]\nworkers = 1\n");
    let error = error_of(load_from(Some(toml.path()), Vec::new(), Vec::new()));
    assert!(error.contains("reviews"), "{error}");
}

#[test]
fn an_unknown_nested_key_from_the_environment_is_refused_with_the_variable() {
    let vars = env(&[("COUNTERSIGN_REVIEW__DEADLNE", "10s")]);
    let error = error_of(load_from(None, vars, Vec::new()));
    assert!(error.contains("review.deadlne"), "{error}");
    assert!(error.contains("COUNTERSIGN_REVIEW__DEADLNE"), "{error}");
}

#[test]
fn a_malformed_duration_is_named_with_its_key_and_source() {
    let toml = file("[review]\ndeadline = \"soon\"\n");
    let error = error_of(load_from(Some(toml.path()), Vec::new(), Vec::new()));
    assert!(error.contains("review.deadline"), "{error}");
    assert!(error.contains("soon"), "{error}");

    let vars = env(&[("COUNTERSIGN_SHUTDOWN_GRACE", "30")]);
    let error = error_of(load_from(None, vars, Vec::new()));
    assert!(
        error.contains("shutdown.grace") && error.contains("COUNTERSIGN_SHUTDOWN_GRACE"),
        "{error}"
    );

    let flags = vec![flag("--review-lease", "review.lease", "a while")];
    let error = error_of(load_from(None, Vec::new(), flags));
    assert!(
        error.contains("review.lease") && error.contains("--review-lease"),
        "{error}"
    );
}

#[test]
fn a_malformed_number_or_address_is_named_with_its_key() {
    let vars = env(&[("COUNTERSIGN_DATABASE_POOL", "many")]);
    let error = error_of(load_from(None, vars, Vec::new()));
    assert!(error.contains("database.pool"), "{error}");
    let toml = file("[metrics]\nlisten = \"localhost\"\n");
    let error = error_of(load_from(Some(toml.path()), Vec::new(), Vec::new()));
    assert!(error.contains("metrics.listen"), "{error}");
}

#[test]
fn the_watch_stream_limits_come_from_the_environment_and_flags_and_refuse_zero() {
    let vars = env(&[("COUNTERSIGN_WATCH_MAX_STREAMS_PER_KEY", "3")]);
    let flags = vec![flag(
        "--watch-max-streams-per-tenant",
        "watch.max_streams_per_tenant",
        "9",
    )];
    let config = load_from(None, vars, flags).unwrap();
    assert_eq!(config.watch.max_streams_per_key.get(), 3);
    assert_eq!(config.watch.max_streams_per_tenant.get(), 9);
    let vars = env(&[("COUNTERSIGN_WATCH_MAX_STREAMS_PER_TENANT", "0")]);
    let error = error_of(load_from(None, vars, Vec::new()));
    assert!(
        error.contains("watch.max_streams_per_tenant")
            && error.contains("COUNTERSIGN_WATCH_MAX_STREAMS_PER_TENANT"),
        "{error}"
    );
}

#[test]
fn a_missing_file_is_refused_naming_it() {
    let error = error_of(load_from(
        Some(Path::new("/nonexistent/countersign.toml")),
        Vec::new(),
        Vec::new(),
    ));
    assert!(error.contains("/nonexistent/countersign.toml"), "{error}");
}

#[test]
fn the_documented_flat_variable_names_keep_their_keys() {
    let cases = [
        ("COUNTERSIGN_LISTEN", "listen"),
        ("COUNTERSIGN_ROLE", "role"),
        ("COUNTERSIGN_DATA_DIR", "data_dir"),
        ("COUNTERSIGN_DATABASE_URL", "database.url"),
        ("COUNTERSIGN_DATABASE_POOL", "database.pool"),
        ("COUNTERSIGN_REDIS_URL", "redis.url"),
        ("COUNTERSIGN_REDIS_PREFIX", "redis.prefix"),
        ("COUNTERSIGN_METRICS_LISTEN", "metrics.listen"),
        ("COUNTERSIGN_CONSOLE_LISTEN", "console.listen"),
        ("COUNTERSIGN_CONSOLE_ENABLED", "console.enabled"),
        ("COUNTERSIGN_LOG_FORMAT", "log.format"),
        ("COUNTERSIGN_SHUTDOWN_GRACE", "shutdown.grace"),
        ("COUNTERSIGN_OUTBOX_POLL", "outbox.poll"),
        ("COUNTERSIGN_OUTBOX_SWEEP", "outbox.sweep"),
        (
            "COUNTERSIGN_RATE_LIMIT_PER_SECOND",
            "api.rate_limit_per_second",
        ),
        ("COUNTERSIGN_RATE_LIMIT_BURST", "api.rate_limit_burst"),
        ("COUNTERSIGN_REQUEST_TIMEOUT", "api.request_timeout"),
        (
            "COUNTERSIGN_CREDENTIAL_CACHE_TTL",
            "api.credential_cache_ttl",
        ),
        ("COUNTERSIGN_REVIEWERS", "review.workers"),
        ("COUNTERSIGN_REVIEW_WORKERS", "review.workers"),
        ("COUNTERSIGN_REVIEW_DEADLINE", "review.deadline"),
        ("COUNTERSIGN_REVIEW_ATTEMPTS", "review.attempts"),
        ("COUNTERSIGN_REVIEW_LEASE", "review.lease"),
        ("COUNTERSIGN_REVIEW__LEASE", "review.lease"),
        ("COUNTERSIGN_WATCH_HEARTBEAT", "watch.heartbeat"),
        ("COUNTERSIGN_WATCH_BUFFER", "watch.buffer"),
        ("COUNTERSIGN_EVENT_RETENTION", "watch.retention"),
        ("COUNTERSIGN_SUPPRESSION_CAPACITY", "suppression.capacity"),
        ("COUNTERSIGN_SUPPRESSION_TTL", "suppression.ttl"),
        ("COUNTERSIGN_SUPPRESSION_MAX_BYTES", "suppression.max_bytes"),
        ("COUNTERSIGN_SIGNING_KEY", "audit.signing_key"),
        ("COUNTERSIGN_SIGNING_KEY_FILE", "audit.signing_key_file"),
        ("COUNTERSIGN_CHECKPOINT_EVERY", "audit.checkpoint_every"),
        ("COUNTERSIGN_API__RATE_LIMIT_BURST", "api.rate_limit_burst"),
    ];
    for (var, key) in cases {
        assert_eq!(env_key(var).as_deref(), Some(key), "{var}");
    }
    let config = load_from(
        None,
        env(&[
            ("COUNTERSIGN_REVIEWERS", "5"),
            ("COUNTERSIGN_RATE_LIMIT_BURST", "77"),
            ("COUNTERSIGN_EVENT_RETENTION", "2d"),
            ("COUNTERSIGN_DATA_DIR", "/srv/cs"),
            ("COUNTERSIGN_ROLE", "api"),
            ("COUNTERSIGN_SUPPRESSION_MAX_BYTES", "1048576"),
        ]),
        Vec::new(),
    )
    .unwrap();
    assert_eq!(config.suppression.max_bytes, 1_048_576);
    assert_eq!(config.review.workers, Some(5));
    assert_eq!(config.api.rate_limit_burst.get(), 77);
    assert_eq!(config.watch.retention, Duration::from_secs(2 * 86_400));
    assert_eq!(config.data_dir.as_deref(), Some(Path::new("/srv/cs")));
    assert_eq!(config.role, Role::Api);
}

#[test]
fn client_test_and_kubernetes_variables_are_not_the_servers() {
    for var in [
        "COUNTERSIGN_ENDPOINT",
        "COUNTERSIGN_API_KEY",
        "COUNTERSIGN_API_KEY_FILE",
        "COUNTERSIGN_CONFIG",
        "COUNTERSIGN_MIGRATE_DATABASE_URL",
        "COUNTERSIGN_SERVICE_ROLE",
        "COUNTERSIGN_TEST_REDIS_URL",
        "COUNTERSIGN_PG_PORT",
        "COUNTERSIGN_PORT",
        "COUNTERSIGN_SERVICE_HOST",
        "COUNTERSIGN_SERVICE_PORT_GRPC",
        "COUNTERSIGN_PORT_50051_TCP_ADDR",
        "COUNTERSIGN_METRICS_SERVICE_HOST",
        "COUNTERSIGN_METRICS_PORT",
        "COUNTERSIGN_METRICS_PORT_9464_TCP",
        "OTHER_LISTEN",
    ] {
        assert_eq!(env_key(var), None, "{var}");
    }
}

#[test]
fn print_masks_the_url_passwords_and_the_signing_key() {
    let vars = env(&[
        (
            "COUNTERSIGN_DATABASE_URL",
            "postgres://app:dbsecret@db:5432/countersign",
        ),
        ("COUNTERSIGN_REDIS_URL", "redis://:redissecret@redis:6379/0"),
        ("COUNTERSIGN_SIGNING_KEY", &"ab".repeat(32)),
    ]);
    let config = load_from(None, vars, Vec::new()).unwrap();
    let printed = crate::config::to_masked_toml(&config).unwrap();
    assert!(!printed.contains("dbsecret"), "{printed}");
    assert!(!printed.contains("redissecret"), "{printed}");
    assert!(!printed.contains(&"ab".repeat(32)), "{printed}");
    assert!(
        printed.contains("postgres://app:****@db:5432/countersign"),
        "{printed}"
    );
    assert!(printed.contains("redis://:****@redis:6379/0"), "{printed}");
    assert!(printed.contains("signing_key = \"****\""), "{printed}");
    // What is printed reads back as a configuration.
    let again = file(&printed);
    let reread = load_from(Some(again.path()), Vec::new(), Vec::new()).unwrap();
    assert_eq!(reread.review, config.review);
    assert_eq!(reread.watch, config.watch);
}

#[test]
fn the_embedded_databases_commits_are_full_unless_normal_is_asked_for() {
    use crate::config::SqliteSynchronous;

    let config = load_from(None, Vec::new(), Vec::new()).unwrap();
    assert_eq!(config.database.sqlite_synchronous, SqliteSynchronous::Full);
    let toml = file("[database]\nsqlite_synchronous = \"normal\"\n");
    let config = load_from(Some(toml.path()), Vec::new(), Vec::new()).unwrap();
    assert_eq!(
        config.database.sqlite_synchronous,
        SqliteSynchronous::Normal
    );
    let vars = env(&[("COUNTERSIGN_DATABASE_SQLITE_SYNCHRONOUS", "full")]);
    let flags = vec![flag(
        "--sqlite-synchronous",
        "database.sqlite_synchronous",
        "normal",
    )];
    let config = load_from(None, vars.clone(), flags).unwrap();
    assert_eq!(
        config.database.sqlite_synchronous,
        SqliteSynchronous::Normal
    );
    assert_eq!(
        load_from(None, vars, Vec::new())
            .unwrap()
            .database
            .sqlite_synchronous,
        SqliteSynchronous::Full
    );

    let vars = env(&[("COUNTERSIGN_DATABASE_SQLITE_SYNCHRONOUS", "off")]);
    let error = error_of(load_from(None, vars, Vec::new()));
    assert!(
        error.contains("database.sqlite_synchronous")
            && error.contains("off")
            && error.contains("COUNTERSIGN_DATABASE_SQLITE_SYNCHRONOUS"),
        "{error}"
    );
}

#[test]
fn zero_where_zero_makes_no_sense_is_refused_naming_the_key_and_source() {
    for (key, _) in crate::config::positive::KEYS {
        let (section, name) = key.split_once('.').unwrap();
        let zero = if matches!(*key, "database.pool" | "review.attempts" | "watch.buffer") {
            "0"
        } else {
            "\"0s\""
        };
        let toml = file(&format!("[{section}]\n{name} = {zero}\n"));
        let error = error_of(load_from(Some(toml.path()), Vec::new(), Vec::new()));
        assert!(
            error.contains(&format!("{key}: must be more than 0")),
            "{error}"
        );
        assert!(
            error.contains(&toml.path().display().to_string()),
            "{key}: {error}"
        );
    }
    let flags = vec![flag("--checkpoint-every", "audit.checkpoint_every", "0s")];
    let error = error_of(load_from(None, Vec::new(), flags));
    assert!(
        error.contains("audit.checkpoint_every") && error.contains("--checkpoint-every"),
        "{error}"
    );
    let vars = env(&[("COUNTERSIGN_WATCH_HEARTBEAT", "0ms")]);
    let error = error_of(load_from(None, vars, Vec::new()));
    assert!(
        error.contains("watch.heartbeat") && error.contains("COUNTERSIGN_WATCH_HEARTBEAT"),
        "{error}"
    );
    let vars = env(&[("COUNTERSIGN_REVIEW_ATTEMPTS", "0")]);
    let error = error_of(load_from(None, vars, Vec::new()));
    assert!(error.contains("review.attempts"), "{error}");
}

#[test]
fn zero_where_zero_means_something_is_kept() {
    let toml = file(
        "[shutdown]\ngrace = \"0s\"\n[api]\ncredential_cache_ttl = \"0s\"\n\
         [suppression]\ncapacity = 0\nttl = \"0s\"\n[review]\nworkers = 0\nexpress_workers = 0\n",
    );
    let config = load_from(Some(toml.path()), Vec::new(), Vec::new()).unwrap();
    assert!(config.shutdown.grace.is_zero());
    assert!(config.api.credential_cache_ttl.is_zero());
    assert_eq!(config.suppression.capacity, 0);
    assert_eq!(config.review.workers, Some(0));
}

#[test]
fn model_endpoints_come_from_the_file_with_their_defaults() {
    let toml = file(
        "[[model.endpoints]]\nname = \"local\"\nbase_url = \"http://127.0.0.1:8081\"\n\
         model = \"llama\"\n\n[[model.endpoints]]\nname = \"hosted\"\n\
         base_url = \"https://api.example.com/v1\"\nmodel = \"m\"\napi_key_env = \"HOSTED_KEY\"\n\
         timeout = \"20s\"\nmax_concurrency = 32\njson_mode = false\n",
    );
    let config = load_from(Some(toml.path()), Vec::new(), Vec::new()).unwrap();
    let endpoints = config.model.endpoints().unwrap();
    assert_eq!(endpoints.len(), 2);
    assert_eq!(endpoints[0].name, "local");
    assert_eq!(endpoints[0].timeout, Duration::from_secs(60));
    assert_eq!(endpoints[0].max_concurrency, 8);
    assert!(endpoints[0].json_mode);
    assert_eq!(endpoints[0].api_key, countersign_model::ApiKey::None);
    assert_eq!(
        endpoints[1].api_key,
        countersign_model::ApiKey::Env("HOSTED_KEY".into())
    );
    assert_eq!(endpoints[1].timeout, Duration::from_secs(20));
    assert_eq!(endpoints[1].max_concurrency, 32);
    assert!(!endpoints[1].json_mode);
    assert!(Config::default().model.endpoints.is_empty());
}

#[test]
fn a_model_endpoint_with_an_unknown_key_or_two_key_sources_is_refused() {
    let toml = file(
        "[[model.endpoints]]\nname = \"x\"\nbase_url = \"http://h\"\nmodel = \"m\"\nurl = \"http://h\"\n",
    );
    let error = error_of(load_from(Some(toml.path()), Vec::new(), Vec::new()));
    assert!(error.contains("url"), "{error}");
    let toml = file(
        "[[model.endpoints]]\nname = \"x\"\nbase_url = \"http://h\"\nmodel = \"m\"\n\
         api_key_env = \"K\"\napi_key_file = \"/k\"\n",
    );
    let config = load_from(Some(toml.path()), Vec::new(), Vec::new()).unwrap();
    let error = format!("{:#}", config.model.endpoints().unwrap_err());
    assert!(error.contains("not both"), "{error}");
    let toml = file(
        "[[model.endpoints]]\nname = \"x\"\nbase_url = \"http://h\"\nmodel = \"m\"\nmax_concurrency = 0\n",
    );
    let error = error_of(load_from(Some(toml.path()), Vec::new(), Vec::new()));
    assert!(
        error.contains("max_concurrency") || error.contains("nonzero") || error.contains("zero"),
        "{error}"
    );
}
