//! The configuration as the real binary reads it: a file, the environment
//! and flags, in that rising order; `config print` with secrets masked.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Output, Stdio},
};

const BIN: &str = env!("CARGO_BIN_EXE_countersign");

/// `countersign ARGS` in `dir` with only the given server variables.
fn countersign(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command.args(args).current_dir(dir);
    for (name, _) in std::env::vars() {
        if name.starts_with("COUNTERSIGN_") {
            command.env_remove(name);
        }
    }
    command
        .envs(env.iter().copied())
        .output()
        .expect("run countersign")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_flag_beats_the_environment_which_beats_the_file_in_the_real_binary() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("countersign.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:1\"\n[review]\ndeadline = \"11s\"\nattempts = 9\n\
         [metrics]\nlisten = \"127.0.0.1:0\"\n",
    )
    .unwrap();

    // File < environment, as `config print` shows it.
    let output = countersign(
        dir.path(),
        &["config", "print", "--config", file.to_str().unwrap()],
        &[("COUNTERSIGN_REVIEW_DEADLINE", "22s")],
    );
    let printed = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(printed.contains("deadline = \"22s\""), "{printed}");
    assert!(printed.contains("attempts = 9"), "{printed}");

    // Environment < flag: serve listens where the flag says, not where the
    // file (port 1) or the environment (port 2) would have it.
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("COUNTERSIGN_CONFIG", &file)
        .env("COUNTERSIGN_LISTEN", "127.0.0.1:2")
        .env_remove("COUNTERSIGN_DATABASE_URL")
        .env_remove("COUNTERSIGN_REDIS_URL")
        .env_remove("COUNTERSIGN_METRICS_LISTEN")
        .env("COUNTERSIGN_CONSOLE_LISTEN", "127.0.0.1:0")
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let addr = line
        .trim()
        .strip_prefix("countersign listening on 127.0.0.1:")
        .unwrap_or_else(|| panic!("{line:?}"));
    assert!(addr != "1" && addr != "2", "{line}");
}

#[test]
fn serve_refuses_an_unknown_key_in_the_file_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[review]\ndeadlne = \"10s\"\n").unwrap();
    let output = countersign(
        dir.path(),
        &["serve", "--config", file.to_str().unwrap()],
        &[],
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("review.deadlne"), "{stderr}");
    assert!(stderr.contains("bad.toml"), "{stderr}");
}

#[test]
fn serve_refuses_an_unknown_nested_key_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let output = countersign(
        dir.path(),
        &["serve"],
        &[("COUNTERSIGN_REVIEW__DEADLNE", "10s")],
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("review.deadlne") && stderr.contains("COUNTERSIGN_REVIEW__DEADLNE"),
        "{stderr}"
    );
}

#[test]
fn serve_names_a_malformed_duration() {
    let dir = tempfile::tempdir().unwrap();
    let output = countersign(dir.path(), &["serve", "--review-lease", "forever"], &[]);
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("review.lease")
            && stderr.contains("--review-lease")
            && stderr.contains("forever"),
        "{stderr}"
    );
}

#[test]
fn config_print_masks_the_redis_password_and_the_signing_key() {
    let dir = tempfile::tempdir().unwrap();
    let seed = "5e".repeat(32);
    let output = countersign(
        dir.path(),
        &["config", "print"],
        &[
            (
                "COUNTERSIGN_DATABASE_URL",
                "postgres://app:dbpass@db/countersign",
            ),
            (
                "COUNTERSIGN_REDIS_URL",
                "redis://default:redispass@redis:6379/0",
            ),
            ("COUNTERSIGN_SIGNING_KEY", &seed),
            // Client-side variables are not the server's: no error.
            ("COUNTERSIGN_API_KEY", "cs_whatever"),
            ("COUNTERSIGN_ENDPOINT", "http://elsewhere:1"),
        ],
    );
    let printed = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    for secret in ["dbpass", "redispass", seed.as_str()] {
        assert!(!printed.contains(secret), "{secret} leaked: {printed}");
    }
    assert!(
        printed.contains("url = \"redis://default:****@redis:6379/0\""),
        "{printed}"
    );
    assert!(
        printed.contains("url = \"postgres://app:****@db/countersign\""),
        "{printed}"
    );
    assert!(printed.contains("signing_key = \"****\""), "{printed}");
}

#[test]
fn the_readmes_flat_variable_names_still_configure_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let output = countersign(
        dir.path(),
        &["config", "print"],
        &[
            ("COUNTERSIGN_LISTEN", "0.0.0.0:7000"),
            ("COUNTERSIGN_ROLE", "api"),
            ("COUNTERSIGN_DATA_DIR", "/srv/countersign"),
            ("COUNTERSIGN_DATABASE_POOL", "4"),
            ("COUNTERSIGN_REDIS_PREFIX", "blue"),
            ("COUNTERSIGN_METRICS_LISTEN", "0.0.0.0:9999"),
            ("COUNTERSIGN_REVIEWERS", "3"),
            ("COUNTERSIGN_REVIEW_DEADLINE", "45s"),
            ("COUNTERSIGN_RATE_LIMIT_PER_SECOND", "17"),
            ("COUNTERSIGN_CREDENTIAL_CACHE_TTL", "0s"),
            ("COUNTERSIGN_EVENT_RETENTION", "2days"),
            ("COUNTERSIGN_OUTBOX_SWEEP", "300ms"),
            ("COUNTERSIGN_SUPPRESSION_CAPACITY", "5"),
            ("COUNTERSIGN_CHECKPOINT_EVERY", "1m"),
        ],
    );
    let printed = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    for expected in [
        "listen = \"0.0.0.0:7000\"",
        "role = \"api\"",
        "data_dir = \"/srv/countersign\"",
        "pool = 4",
        "prefix = \"blue\"",
        "listen = \"0.0.0.0:9999\"",
        "workers = 3",
        "deadline = \"45s\"",
        "rate_limit_per_second = 17",
        "credential_cache_ttl = \"0s\"",
        "retention = \"2days\"",
        "sweep = \"300ms\"",
        "capacity = 5",
        "checkpoint_every = \"1m\"",
    ] {
        assert!(
            printed.contains(expected),
            "{expected} missing from:\n{printed}"
        );
    }
}

/// `countersign serve ARGS` in `dir` on port 0 (metrics too), with no other
/// server variables.
fn serve(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .current_dir(dir)
        .env("COUNTERSIGN_METRICS_LISTEN", "127.0.0.1:0")
        .env("COUNTERSIGN_CONSOLE_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, _) in std::env::vars() {
        if name.starts_with("COUNTERSIGN_")
            && name != "COUNTERSIGN_METRICS_LISTEN"
            && name != "COUNTERSIGN_CONSOLE_LISTEN"
        {
            command.env_remove(name);
        }
    }
    command
}

/// What `serve` (`command`) said on stderr as it refused to start; a server
/// that started (and announced its address) fails the test.
fn refused_start(mut command: Command) -> String {
    let mut child = command.spawn().expect("start countersign serve");
    // A server that started would announce its address; a refused start
    // ends with nothing on stdout.
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    if !first.is_empty() {
        let _ = child.kill();
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(first, "", "the server started");
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    stderr
}

#[test]
fn a_zero_checkpoint_interval_stops_the_start_naming_the_key_and_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    for (args, env, named) in [
        (
            &["--checkpoint-every", "0s"][..],
            None,
            ["audit.checkpoint_every", "--checkpoint-every"],
        ),
        (
            &[][..],
            Some(("COUNTERSIGN_WATCH_HEARTBEAT", "0s")),
            ["watch.heartbeat", "COUNTERSIGN_WATCH_HEARTBEAT"],
        ),
    ] {
        let mut command = serve(dir.path(), args);
        if let Some((name, value)) = env {
            command.env(name, value);
        }
        let stderr = refused_start(command);
        for name in named {
            assert!(stderr.contains(name), "{name}: {stderr}");
        }
        assert!(stderr.contains("must be more than 0"), "{stderr}");
        assert!(
            !dir.path().join("countersign-data").exists(),
            "refused before anything is created"
        );
    }
}

#[test]
fn serve_refuses_a_model_endpoint_whose_key_it_cannot_read_naming_the_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("countersign.toml");
    std::fs::write(
        &file,
        "[[model.endpoints]]\nname = \"local\"\nbase_url = \"http://127.0.0.1:8081\"\n\
         model = \"qwen2.5-7b-instruct\"\napi_key_env = \"CS_TEST_MODEL_KEY_NEVER_SET\"\n",
    )
    .unwrap();
    let mut command = serve(dir.path(), &["--config", file.to_str().unwrap()]);
    command.env_remove("CS_TEST_MODEL_KEY_NEVER_SET");
    let stderr = refused_start(command);
    assert!(
        stderr.contains("model endpoint `local`")
            && stderr.contains("CS_TEST_MODEL_KEY_NEVER_SET is not set"),
        "{stderr}"
    );
}
