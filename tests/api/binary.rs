//! The built binary, run as a newcomer would: `serve` on a free port, then
//! `admin key create`, `submit` and `get` against it.

use std::{
    io::{BufRead, BufReader},
    os::unix::fs::PermissionsExt,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

const BIN: &str = env!("CARGO_BIN_EXE_countersign");

pub struct Server {
    pub child: Child,
    pub endpoint: String,
    /// Drains the server's stderr as it writes (a pipe nobody reads fills
    /// at 64 KiB and then blocks the server's logging, and with it the
    /// server), and answers it whole once the server has exited.
    logs: Option<std::thread::JoinHandle<String>>,
}

impl Server {
    /// Everything the server wrote to stderr; call once it has exited.
    pub fn logs(&mut self) -> String {
        self.logs
            .take()
            .map(|drain| drain.join().unwrap())
            .unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path) -> Server {
    serve_with(dir, &[])
}

pub fn serve_with(dir: &Path, extra: &[&str]) -> Server {
    let listen = if extra.contains(&"--listen") {
        &[][..]
    } else {
        &["--listen", "127.0.0.1:0"][..]
    };
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(listen)
        .args(extra)
        .current_dir(dir)
        .env_remove("COUNTERSIGN_DATABASE_URL")
        .env_remove("COUNTERSIGN_DATA_DIR")
        .env("COUNTERSIGN_METRICS_LISTEN", "127.0.0.1:0")
        .env("COUNTERSIGN_CONSOLE_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start countersign serve");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("countersign listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
    // Both pipes stay drained for as long as the server runs.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let mut stderr = child.stderr.take().unwrap();
    let logs = std::thread::spawn(move || {
        let mut logs = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut logs);
        logs
    });
    Server {
        child,
        endpoint: format!("http://{addr}"),
        logs: Some(logs),
    }
}

fn countersign(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let (code, out, err) = exit_of(dir, args, env);
    (code == Some(0), out, err)
}

/// The server runs without transparent huge pages: with them, every 2 MiB
/// region of its allocator's arenas that holds one live 64 KiB page stays
/// resident whole (BENCHMARKS.md, "embedded memory").
#[cfg(target_os = "linux")]
#[test]
fn serve_runs_without_transparent_huge_pages() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    let enabled = status
        .lines()
        .find_map(|line| line.strip_prefix("THP_enabled:"))
        .map(str::trim);
    assert_eq!(enabled, Some("0"), "{status}");
}

#[test]
fn a_newcomer_serves_creates_a_key_submits_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());

    let key_file = dir.path().join("countersign-data/admin.key");
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "admin.key must be owner-only");
    let admin_key = std::fs::read_to_string(&key_file)
        .unwrap()
        .trim()
        .to_owned();
    assert!(admin_key.starts_with("cs_"));

    let (ok, key, err) = countersign(
        dir.path(),
        &[
            "admin",
            "key",
            "create",
            "--tenant",
            "default",
            "--role",
            "coordinator",
            "--name",
            "sre-bot",
        ],
        &[],
    );
    assert!(ok, "{err}");
    let key = key.trim().to_owned();
    assert!(
        key.starts_with("cs_") && !key.contains(char::is_whitespace),
        "{key:?}"
    );

    let admin_env = [
        ("COUNTERSIGN_ENDPOINT", server.endpoint.as_str()),
        ("COUNTERSIGN_API_KEY", admin_key.as_str()),
    ];
    std::fs::write(
        dir.path().join("sop.yaml"),
        "id: SOP-007\naction: host_restart_service\ntitle: Restart a service\n\
         rollback_path: systemctl start nginx\nmax_blast_radius: single_device\n\
         selector:\n  env: production\n",
    )
    .unwrap();
    let (ok, out, err) = countersign(dir.path(), &["sop", "put", "-f", "sop.yaml"], &admin_env);
    assert!(
        ok && out.contains("SOP-007") && out.contains("v1"),
        "{out}{err}"
    );
    let (ok, out, err) = countersign(
        dir.path(),
        &[
            "target",
            "put",
            "node-01",
            "--status",
            "online",
            "--label",
            "env=production",
            "--label",
            "cluster=eu-1",
        ],
        &admin_env,
    );
    assert!(ok && out.contains("online"), "{out}{err}");

    let env = [
        ("COUNTERSIGN_ENDPOINT", server.endpoint.as_str()),
        ("COUNTERSIGN_API_KEY", key.as_str()),
    ];
    let (ok, out, err) = countersign(
        dir.path(),
        &[
            "submit",
            "--json",
            "--wait",
            "--action",
            "host_restart_service",
            "--class",
            "write",
            "--target",
            "node-01",
            "--reason",
            "nginx OOM",
            "--blast-radius",
            "single_device",
            "--param",
            "service=nginx",
            "--label",
            "env=production",
        ],
        &env,
    );
    assert!(ok, "{out}{err}");
    let approved: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(approved["state"], "approved");
    assert_eq!(approved["submitted_by"], "sre-bot");
    assert_eq!(approved["decision"]["sop_id"], "SOP-007");
    assert_eq!(approved["spec"]["parameters"]["service"], "nginx");
    let id = approved["id"].as_str().unwrap().to_owned();

    let output = Command::new(BIN)
        .args([
            "submit",
            "--wait",
            "--action",
            "host_restart_service",
            "--class",
            "write",
            "--target",
            "node-77",
            "--reason",
            "nginx OOM",
            "--blast-radius",
            "single_device",
        ])
        .current_dir(dir.path())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "a rejection exits 3");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("Decision: reject") && text.contains("target node-77 is unknown"),
        "{text}"
    );

    // A proposal from a file; a flag overrides the file's field.
    std::fs::write(
        dir.path().join("proposal.yaml"),
        "action: host_restart_service\nclass: write\ntarget: node-01\nblast_radius: single_device\n\
         reason: from a file\nparameters:\n  service: nginx\n  workers: 4\nlabels:\n  env: production\n",
    )
    .unwrap();
    let (ok, out, err) = countersign(
        dir.path(),
        &[
            "submit",
            "--json",
            "-f",
            "proposal.yaml",
            "--reason",
            "flag wins",
        ],
        &env,
    );
    assert!(ok, "{out}{err}");
    let from_file: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(from_file["spec"]["reason"], "flag wins");
    assert_eq!(from_file["spec"]["parameters"]["workers"], 4.0);
    assert_eq!(from_file["spec"]["labels"]["env"], "production");
    std::fs::write(dir.path().join("bad.yaml"), "action: x\nsurprise: 1\n").unwrap();
    let (ok, _, err) = countersign(dir.path(), &["submit", "-f", "bad.yaml"], &env);
    assert!(!ok && err.contains("surprise"), "{err}");

    let (ok, out, err) = countersign(dir.path(), &["get", &id], &env);
    assert!(ok, "{err}");
    assert!(
        out.contains(&id) && out.contains("approved") && out.contains("Decision: approve"),
        "{out}"
    );

    let (ok, _, err) = countersign(dir.path(), &["cancel", &id], &env);
    assert!(!ok);
    assert!(err.contains("FAILED_PRECONDITION"), "{err}");

    let (ok, _, err) = countersign(
        dir.path(),
        &["get", "nope"],
        &[
            ("COUNTERSIGN_ENDPOINT", server.endpoint.as_str()),
            ("COUNTERSIGN_API_KEY", "cs_bad"),
        ],
    );
    assert!(!ok);
    assert!(err.contains("UNAUTHENTICATED"), "{err}");

    // The admin key is on disk for its owner; it never appears in the logs.
    drop(server);
}

#[test]
fn serve_logs_the_admin_key_path_never_the_key_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(dir.path());
    let key = std::fs::read_to_string(dir.path().join("countersign-data/admin.key")).unwrap();
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut status = None;
    for _ in 0..100 {
        if let Some(s) = server.child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = status.expect("serve exits on SIGTERM");
    assert!(status.success(), "{status:?}");
    let logs = server.logs();
    assert!(logs.contains("admin.key"), "{logs}");
    assert!(!logs.contains(key.trim()), "the key leaked into the logs");
    assert!(logs.contains("SIGTERM"), "{logs}");

    // A second start on the same data keeps the first key and mints no other.
    let first = key.clone();
    let _again = serve(dir.path());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("countersign-data/admin.key")).unwrap(),
        first
    );
}

#[test]
fn admin_commands_manage_tenants_keys_and_policy() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| countersign(dir.path(), args, &[]);
    let (ok, out, err) = run(&["admin", "tenant", "create", "acme"]);
    assert!(ok && out.trim() == "acme", "{out}{err}");
    let (ok, _, err) = run(&["admin", "tenant", "create", "acme"]);
    assert!(!ok && err.contains("already exists"), "{err}");
    let (ok, out, err) = run(&[
        "admin",
        "tenant",
        "set",
        "acme",
        "--parallel-window",
        "5m",
        "--allow-force-approve-no-sop",
        "true",
        "--breaker-threshold",
        "5",
        "--breaker-window",
        "2m",
        "--receipt-ttl",
        "90s",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("5m") && out.contains("true"), "{out}");
    assert!(out.contains("5 rejections in 2m"), "{out}");
    assert!(out.contains("receipts valid for          1m 30s"), "{out}");
    let (ok, _, err) = run(&["admin", "tenant", "set", "acme", "--receipt-ttl", "2days"]);
    assert!(!ok && err.contains("receipt_ttl_ms"), "{err}");
    let (ok, out, err) = run(&[
        "admin",
        "breaker",
        "reset",
        "--tenant",
        "acme",
        "--operator",
        "agent-7",
    ]);
    assert!(ok && out.contains("reset"), "{out}{err}");
    let (ok, _, err) = run(&[
        "admin",
        "breaker",
        "reset",
        "--tenant",
        "ghost",
        "--operator",
        "agent-7",
    ]);
    assert!(!ok && err.contains("not found"), "{err}");
    let (ok, key, err) = run(&[
        "admin", "key", "create", "--tenant", "acme", "--role", "auditor", "--agent",
    ]);
    assert!(ok, "{err}");
    let id = countersign_domain::api_key::parse(key.trim()).unwrap().id;
    let (ok, out, _) = run(&["admin", "key", "list", "--tenant", "acme"]);
    assert!(ok && out.contains(&id) && out.contains("auditor"), "{out}");
    assert!(!out.contains(key.trim()), "list must never print secrets");
    let (ok, out, err) = run(&["admin", "key", "revoke", &id]);
    assert!(ok && out.contains("revoked"), "{out}{err}");
    let (ok, _, err) = run(&[
        "admin", "key", "create", "--tenant", "acme", "--role", "root",
    ]);
    assert!(!ok && err.contains("role"), "{err}");
    let (ok, _, err) = run(&[
        "admin", "key", "create", "--tenant", "ghost", "--role", "admin",
    ]);
    assert!(!ok && err.contains("not found"), "{err}");
}

#[test]
fn an_api_process_and_a_worker_process_share_the_embedded_database() {
    let dir = tempfile::tempdir().unwrap();
    let api = serve_with(dir.path(), &["--role", "api"]);
    let key_file = dir.path().join("countersign-data/admin.key");
    let env = [
        ("COUNTERSIGN_ENDPOINT", api.endpoint.as_str()),
        ("COUNTERSIGN_API_KEY_FILE", key_file.to_str().unwrap()),
    ];
    let submit = [
        "submit",
        "--json",
        "--action",
        "drain",
        "--class",
        "write",
        "--target",
        "t1",
        "--reason",
        "r",
        "--blast-radius",
        "cluster",
    ];
    // With no worker anywhere, the proposal waits.
    let (ok, out, err) = countersign(dir.path(), &submit, &env);
    assert!(ok, "{err}");
    let pending: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(pending["state"], "pending");
    let id = pending["id"].as_str().unwrap().to_owned();

    let mut worker = Command::new(BIN)
        .args(["serve", "--role", "worker", "--listen", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env_remove("COUNTERSIGN_DATABASE_URL")
        .env("COUNTERSIGN_METRICS_LISTEN", "127.0.0.1:0")
        .env("COUNTERSIGN_CONSOLE_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (_, out, err) = countersign(
        dir.path(),
        &["await", &id, "--json", "--timeout", "20s"],
        &env,
    );
    let _ = worker.kill();
    let _ = worker.wait();
    let decided: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}{err}"));
    assert_eq!(decided["state"], "rejected", "{decided}");
    assert!(
        decided["decision"]["missing_gates"]
            .as_array()
            .unwrap()
            .len()
            >= 4,
        "{decided}"
    );
    drop(api);
}

/// Reads a child's stdout lines on a thread, so a test can wait with a limit.
fn lines_of(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn next_line(lines: &std::sync::mpsc::Receiver<String>) -> String {
    lines
        .recv_timeout(Duration::from_secs(30))
        .expect("a line in time")
}

#[test]
fn watch_follows_the_stream_and_resumes_by_itself_when_the_server_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let server = serve_with(dir.path(), &["--listen", &listen]);
    let endpoint = server.endpoint.clone();
    let key_file = dir.path().join("countersign-data/admin.key");
    let env = [
        ("COUNTERSIGN_ENDPOINT", endpoint.as_str()),
        ("COUNTERSIGN_API_KEY_FILE", key_file.to_str().unwrap()),
    ];
    let submit = [
        "submit",
        "--wait",
        "--action",
        "drain",
        "--class",
        "write",
        "--target",
        "t1",
        "--reason",
        "r",
        "--blast-radius",
        "cluster",
    ];
    let (ok, _, err) = countersign(dir.path(), &submit, &env);
    assert!(!ok, "no SOP: rejected (exit 3) {err}");

    let mut watcher = Command::new(BIN)
        .args(["watch", "--after", "0", "--json"])
        .current_dir(dir.path())
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut watcher);
    let mut events: Vec<serde_json::Value> = (0..2)
        .map(|_| serde_json::from_str(&next_line(&lines)).unwrap())
        .collect();

    drop(server);
    let server = serve_with(dir.path(), &["--listen", &listen]);
    let (ok, _, _) = countersign(dir.path(), &submit, &env);
    assert!(!ok);
    events.extend(
        (0..2).map(|_| serde_json::from_str::<serde_json::Value>(&next_line(&lines)).unwrap()),
    );
    let _ = watcher.kill();
    let _ = watcher.wait();

    let kinds: Vec<_> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        // `submit --wait` is decided as it is stored: no review start.
        ["SUBMITTED", "REJECTED", "SUBMITTED", "REJECTED"]
    );
    let cursors: Vec<_> = events
        .iter()
        .map(|e| e["cursor"].as_u64().unwrap())
        .collect();
    assert!(
        cursors.windows(2).all(|w| w[0] < w[1]),
        "in order, none twice: {cursors:?}"
    );
    assert_ne!(events[0]["proposal"]["id"], events[2]["proposal"]["id"]);

    // For people: one line per event, outcome and missing gates.
    let mut readable = Command::new(BIN)
        .args(["watch", "--after", "0", "--terminal-only"])
        .current_dir(dir.path())
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut readable);
    let line = next_line(&lines);
    let _ = readable.kill();
    let _ = readable.wait();
    assert!(
        line.contains("drain t1 → REJECTED") && line.contains("missing: sop"),
        "{line}"
    );
    drop(server);
}

#[test]
fn an_auditor_exports_the_log_and_verifies_it_offline_against_a_signed_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let admin_key = admin_key(dir.path());
    let admin = [
        ("COUNTERSIGN_ENDPOINT", server.endpoint.as_str()),
        ("COUNTERSIGN_API_KEY", admin_key.as_str()),
    ];
    // Three decisions: two unknown targets (rejected) and one more.
    for target in ["node-91", "node-92", "node-93"] {
        let (_, out, err) = countersign(
            dir.path(),
            &[
                "submit",
                "--wait",
                "--json",
                "--action",
                "host_restart_service",
                "--class",
                "write",
                "--target",
                target,
                "--reason",
                "r",
                "--blast-radius",
                "single_device",
                "--operator",
                target,
            ],
            &admin,
        );
        assert!(out.contains("\"rejected\""), "{out}{err}");
    }
    // The sequencer appends moments after the decisions commit.
    let mut export = String::new();
    for _ in 0..100 {
        let (ok, out, err) = countersign(dir.path(), &["decisions", "--all", "--json"], &admin);
        assert!(ok, "{err}");
        if out.lines().count() == 3 {
            export = out;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(export.lines().count(), 3, "{export}");
    std::fs::write(dir.path().join("decisions.jsonl"), &export).unwrap();

    let (ok, csv, err) = countersign(
        dir.path(),
        &["decisions", "--csv", "--target", "node-92"],
        &admin,
    );
    assert!(ok, "{err}");
    assert!(
        csv.starts_with("\"sequence\",\"decided_at\",\"proposal_id\""),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 2, "{csv}");
    assert!(
        csv.contains(",\"node-92\",") && csv.contains(",\"reject\","),
        "{csv}"
    );
    assert!(csv.contains("target node-92 is unknown"), "{csv}");

    // An agent credential's export carries the terse view: no reason, no record.
    let (ok, agent_key, err) = countersign(
        dir.path(),
        &[
            "admin", "key", "create", "--tenant", "default", "--role", "auditor", "--agent",
        ],
        &[],
    );
    assert!(ok, "{err}");
    let agent = [
        ("COUNTERSIGN_ENDPOINT", server.endpoint.as_str()),
        ("COUNTERSIGN_API_KEY", agent_key.trim()),
    ];
    for format in ["--csv", "--json"] {
        let (ok, out, err) = countersign(dir.path(), &["decisions", "--all", format], &agent);
        assert!(ok, "{err}");
        assert_eq!(
            out.lines().count(),
            3 + usize::from(format == "--csv"),
            "{out}"
        );
        assert!(
            !out.contains("is unknown") && !out.contains("target_state"),
            "{format}: {out}"
        );
    }

    let (ok, checkpoint, err) = countersign(dir.path(), &["checkpoint", "--refresh"], &admin);
    assert!(ok, "{err}");
    std::fs::write(dir.path().join("cp.json"), &checkpoint).unwrap();
    let (ok, public_key, err) = countersign(dir.path(), &["admin", "signing-key", "show"], &[]);
    assert!(ok, "{err}");
    let public_key = public_key.trim();
    assert!(checkpoint.contains(public_key), "{checkpoint}");
    let mode = std::fs::metadata(dir.path().join("countersign-data/signing.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "signing.key must be owner-only");

    let (ok, out, err) = countersign(dir.path(), &["verify"], &admin);
    assert!(
        ok && out.starts_with("ok: 3 entries verified"),
        "{out}{err}"
    );
    drop(server);

    // Offline: no server, only the export, the checkpoint and the public key.
    let offline = [
        "verify",
        "--export",
        "decisions.jsonl",
        "--checkpoint",
        "cp.json",
        "--public-key",
        public_key,
    ];
    let (ok, out, err) = countersign(dir.path(), &offline, &[]);
    assert!(
        ok && out.starts_with("ok: 3 entries verified"),
        "{out}{err}"
    );

    let tampered = export.replacen("node-92", "node-29", 1);
    std::fs::write(dir.path().join("decisions.jsonl"), &tampered).unwrap();
    let (ok, out, _) = countersign(dir.path(), &offline, &[]);
    assert!(
        !ok && out.contains("INVALID at sequence 2: altered"),
        "{out}"
    );

    std::fs::write(dir.path().join("decisions.jsonl"), &export).unwrap();
    let forged = checkpoint.replacen("\"size\": 3", "\"size\": 2", 1);
    assert_ne!(forged, checkpoint);
    std::fs::write(dir.path().join("cp.json"), forged).unwrap();
    let (ok, _, err) = countersign(dir.path(), &offline, &[]);
    assert!(!ok && err.contains("signature"), "{err}");
}

/// The README exports a coordinator's key, then runs the auditor's commands
/// with `--api-key-file auditor.key`: the flag given on the command line wins
/// over the environment, or the auditor's commands would run as the coordinator.
#[test]
fn an_api_key_flag_beats_the_key_in_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let admin_file = dir.path().join("countersign-data/admin.key");
    let admin_file = admin_file.to_str().unwrap();
    let create = |role: &str| {
        let (ok, key, err) = countersign(
            dir.path(),
            &[
                "admin", "key", "create", "--tenant", "default", "--role", role, "--name", role,
            ],
            &[],
        );
        assert!(ok, "{err}");
        key.trim().to_owned()
    };
    let coordinator = create("coordinator");
    let auditor = create("auditor");
    let auditor_file = dir.path().join("auditor.key");
    std::fs::write(&auditor_file, &auditor).unwrap();
    let env = [
        ("COUNTERSIGN_ENDPOINT", server.endpoint.as_str()),
        ("COUNTERSIGN_API_KEY", coordinator.as_str()),
    ];

    let (ok, _, err) = countersign(dir.path(), &["decisions"], &env);
    assert!(
        !ok && err.contains("PERMISSION_DENIED"),
        "the coordinator's key: {err}"
    );
    let (ok, out, err) = countersign(
        dir.path(),
        &[
            "decisions",
            "--api-key-file",
            auditor_file.to_str().unwrap(),
        ],
        &env,
    );
    assert!(ok, "--api-key-file beats COUNTERSIGN_API_KEY: {out}{err}");
    let (ok, out, err) = countersign(
        dir.path(),
        &["decisions", "--api-key", &auditor],
        &[
            ("COUNTERSIGN_ENDPOINT", server.endpoint.as_str()),
            ("COUNTERSIGN_API_KEY_FILE", admin_file),
        ],
    );
    assert!(ok, "--api-key beats COUNTERSIGN_API_KEY_FILE: {out}{err}");
}

/// Starts `serve` expecting it to refuse: its error output. A server that
/// starts instead is stopped and the test fails.
fn refused_start(dir: &Path, extra: &[&str]) -> String {
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(extra)
        .current_dir(dir)
        .env_remove("COUNTERSIGN_DATABASE_URL")
        .env_remove("COUNTERSIGN_DATA_DIR")
        .env_remove("COUNTERSIGN_SIGNING_KEY")
        .env("COUNTERSIGN_METRICS_LISTEN", "127.0.0.1:0")
        .env("COUNTERSIGN_CONSOLE_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start countersign serve");
    for _ in 0..600 {
        if child.try_wait().unwrap().is_some() {
            let output = child.wait_with_output().unwrap();
            assert!(!output.status.success(), "serve exited 0");
            return String::from_utf8_lossy(&output.stderr).into_owned();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("serve started; it should have refused");
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The first admin key and the signing key belong with the database: beside
/// its SQLite file, wherever `serve` or `admin` runs from. `admin signing-key
/// show` never makes a key, and `serve` never starts with a key other than
/// the one that signed the database's checkpoints.
#[test]
fn key_files_live_beside_the_database_and_serve_keeps_the_key_that_signed_its_checkpoints() {
    let root = tempfile::tempdir().unwrap();
    let (data, elsewhere) = (root.path().join("data"), root.path().join("elsewhere"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let url = format!("sqlite://{}", data.join("cs.db").display());
    let show = [
        "admin",
        "signing-key",
        "show",
        "--database-url",
        url.as_str(),
    ];

    let (ok, _, err) = countersign(&data, &show, &[]);
    assert!(!ok && err.contains("no signing key"), "{err}");
    assert!(err.contains("serve"), "says where a key comes from: {err}");
    assert!(!data.join("signing.key").exists(), "show created a key");

    let server = serve_with(&elsewhere, &["--database-url", &url]);
    for file in [
        "admin.key",
        "signing.key",
        "cs.db",
        "cs.db-wal",
        "cs.db-shm",
    ] {
        assert_eq!(mode(&data.join(file)), 0o600, "{file} is owner-only");
    }
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing is written where serve started"
    );
    let (ok, public_key, err) = countersign(&elsewhere, &show, &[]);
    assert!(ok, "{err}");
    let public_key = public_key.trim().to_owned();
    assert_eq!(countersign(&data, &show, &[]).1.trim(), public_key);

    let admin_key = std::fs::read_to_string(data.join("admin.key")).unwrap();
    let admin = [
        ("COUNTERSIGN_ENDPOINT", server.endpoint.as_str()),
        ("COUNTERSIGN_API_KEY", admin_key.trim()),
    ];
    let (ok, checkpoint, err) = countersign(&elsewhere, &["checkpoint", "--refresh"], &admin);
    assert!(ok && checkpoint.contains(&public_key), "{checkpoint}{err}");
    drop(server);

    // The key that signed the checkpoints is gone: serve refuses, and makes
    // no other in its place.
    let kept = data.join("signing.key.kept");
    std::fs::rename(data.join("signing.key"), &kept).unwrap();
    let err = refused_start(&elsewhere, &["--database-url", &url]);
    assert!(
        err.contains("does not exist") && err.contains(&public_key),
        "{err}"
    );
    assert!(!data.join("signing.key").exists(), "serve made a new key");

    // Another key in its place: refused, naming both.
    let other = countersign_domain::audit::SigningKey::from_seed([9; 32]);
    std::fs::write(data.join("signing.key"), hex_seed(9)).unwrap();
    let err = refused_start(&elsewhere, &["--database-url", &url]);
    assert!(
        err.contains(&public_key) && err.contains(&other.public_hex()),
        "{err}"
    );
    let err = refused_start(
        &elsewhere,
        &["--database-url", &url, "--signing-key", &hex_seed(9)],
    );
    assert!(err.contains(&public_key), "{err}");

    // The right key back: it starts.
    std::fs::rename(&kept, data.join("signing.key")).unwrap();
    let _server = serve_with(&elsewhere, &["--database-url", &url]);
}

/// A 32-byte seed of `byte`, as hex.
fn hex_seed(byte: u8) -> String {
    format!("{byte:02x}").repeat(32)
}

#[test]
fn logs_written_to_a_file_carry_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("serve.log");
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env_remove("COUNTERSIGN_DATABASE_URL")
        .env_remove("COUNTERSIGN_DATA_DIR")
        .env_remove("NO_COLOR")
        .env("COUNTERSIGN_METRICS_LISTEN", "127.0.0.1:0")
        .env("COUNTERSIGN_CONSOLE_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("start countersign serve");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.starts_with("countersign listening on "), "{line:?}");
    // The address is announced once bound; the API logs that it serves a
    // moment later (a stop before then ends the start without that line).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log_path)
        .unwrap()
        .contains("countersign API serving")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the API never logged that it serves"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let logs = std::fs::read(&log_path).unwrap();
    let text = String::from_utf8_lossy(&logs);
    assert!(text.contains("INFO"), "{text}");
    assert!(text.contains("countersign API serving"), "{text}");
    assert!(
        !logs.contains(&0x1b),
        "ESC in a log written to a file: {text:?}"
    );
}

/// The admin key the first start wrote.
fn admin_key(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("countersign-data/admin.key"))
        .unwrap()
        .trim()
        .to_owned()
}

/// Runs the binary in `dir` with `env`: (exit code, stdout, stderr).
fn exit_of(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let output = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("COUNTERSIGN_API_KEY")
        .env_remove("COUNTERSIGN_DATABASE_URL")
        .envs(env.iter().copied())
        .output()
        .expect("run countersign");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn on_call_puts_a_route_reads_the_inbox_and_approves_or_denies_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let admin_key = admin_key(dir.path());
    let mint_with = |role: &str, name: &str, person: Option<&str>, extra: &[&str]| {
        let mut args = vec![
            "admin", "key", "create", "--tenant", "default", "--role", role, "--name", name,
        ];
        if let Some(person) = person {
            args.extend(["--person", person]);
        }
        args.extend(extra);
        let (ok, key, err) = countersign(dir.path(), &args, &[]);
        assert!(ok, "{err}");
        key.trim().to_owned()
    };
    let mint = |role: &str, name: &str, person: Option<&str>| mint_with(role, name, person, &[]);
    let sam = mint("coordinator", "sre-bot", Some("sam@example.com"));
    let ann = mint("oncall", "ann", Some("ann@example.com"));
    let bob = mint("oncall", "bob", Some("bob@example.com"));
    let nobody = mint("oncall", "pager", None);
    // An agent key records the person it acts for.
    mint_with(
        "coordinator",
        "dave-bot",
        Some("dave@example.com"),
        &["--agent"],
    );
    let (ok, out, err) = countersign(
        dir.path(),
        &["admin", "key", "list", "--tenant", "default"],
        &[],
    );
    assert!(ok, "{err}");
    let bots = out
        .lines()
        .find(|l| l.contains(" dave-bot "))
        .unwrap_or_default();
    assert!(bots.contains("dave@example.com"), "{out}");
    let anns = out
        .lines()
        .find(|l| l.contains(" ann "))
        .unwrap_or_default();
    assert!(anns.contains("ann@example.com"), "{out}");
    let pagers = out
        .lines()
        .find(|l| l.contains(" pager "))
        .unwrap_or_default();
    assert!(pagers.contains(" - "), "a key without a person: {out}");

    let as_key = |key: &str| {
        [
            ("COUNTERSIGN_ENDPOINT", server.endpoint.clone()),
            ("COUNTERSIGN_API_KEY", key.to_owned()),
        ]
    };
    let run = |key: &str, args: &[&str]| {
        let env = as_key(key);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        exit_of(dir.path(), args, &env)
    };
    std::fs::write(
        dir.path().join("sop.yaml"),
        "id: SOP-007\naction: host_restart_service\ntitle: Restart a service\n\
         rollback_path: systemctl start nginx\nmax_blast_radius: single_device\n\
         selector:\n  env: production\n",
    )
    .unwrap();
    let (code, out, err) = run(&admin_key, &["sop", "put", "-f", "sop.yaml"]);
    assert_eq!(code, Some(0), "{out}{err}");
    for node in ["node-01", "node-02"] {
        let args = [
            "target",
            "put",
            node,
            "--status",
            "online",
            "--label",
            "env=production",
        ];
        let (code, out, err) = run(&admin_key, &args);
        assert_eq!(code, Some(0), "{out}{err}");
    }
    std::fs::write(
        dir.path().join("route.yaml"),
        "id: restarts\nmatch:\n  actions: [\"host_*\"]\n  classes: [write]\n\
         approvals_required: 2\nexpires_after: 30m\n",
    )
    .unwrap();
    let (code, out, err) = run(&ann, &["route", "put", "-f", "route.yaml"]);
    assert_eq!(code, Some(1), "only admins: {out}");
    assert!(err.contains("PERMISSION_DENIED"), "{err}");
    let (code, out, err) = run(&admin_key, &["route", "put", "-f", "route.yaml"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("restarts") && out.contains("30m"), "{out}");
    let (code, out, _) = run(&admin_key, &["route", "list", "--json"]);
    assert_eq!(code, Some(0));
    let listed: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(listed["approvals_required"], 2);
    assert_eq!(
        listed["approver_roles"],
        serde_json::json!(["oncall", "admin"])
    );

    let submit = |target: &str| {
        let (code, out, err) = run(
            &sam,
            &[
                "submit",
                "--json",
                "--action",
                "host_restart_service",
                "--class",
                "write",
                "--target",
                target,
                "--reason",
                "nginx OOM",
                "--blast-radius",
                "single_device",
            ],
        );
        assert_eq!(code, Some(0), "{out}{err}");
        let proposal: serde_json::Value = serde_json::from_str(&out).unwrap();
        proposal["id"].as_str().unwrap().to_owned()
    };
    let approved = submit("node-01");
    let denied = submit("node-02");
    let escalated = |id: &str| {
        for _ in 0..1500 {
            let (_, out, _) = run(&ann, &["get", "--json", id]);
            let proposal: serde_json::Value = serde_json::from_str(&out).unwrap();
            if proposal["state"] == "escalated" {
                return proposal;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{id} never escalated");
    };
    let waiting = escalated(&approved);
    assert_eq!(waiting["decision"]["route_id"], "restarts");
    assert_eq!(waiting["submitted_by_person"], "sam@example.com");
    escalated(&denied);

    let (code, out, err) = run(&ann, &["inbox"]);
    assert_eq!(code, Some(0), "{err}");
    let line = out
        .lines()
        .find(|l| l.contains(&approved))
        .unwrap_or_default();
    assert!(
        line.contains("left") && line.contains("route restarts") && line.contains("0 of 2"),
        "{out}"
    );

    let (code, _, err) = run(&nobody, &["approve", &approved]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("PERMISSION_DENIED") && err.contains("(person)"),
        "{err}"
    );
    let (code, out, err) = run(
        &ann,
        &["approve", &approved, "--comment", "agreed in #inc-7"],
    );
    assert_eq!(code, Some(3), "one of two approvals: {out}{err}");
    assert!(
        out.contains("escalated") && out.contains("agreed in #inc-7"),
        "{out}"
    );

    // What waits for ann is what she has not voted on; --all is everything.
    let listed = |key: &str, args: &[&str]| {
        let (code, out, err) = run(key, args);
        assert_eq!(code, Some(0), "{args:?}: {out}{err}");
        out
    };
    let lines_with = |out: &str, id: &str| out.lines().filter(|l| l.contains(id)).count();
    let anns = listed(&ann, &["inbox"]);
    assert_eq!(
        (lines_with(&anns, &approved), lines_with(&anns, &denied)),
        (0, 1),
        "{anns}"
    );
    let all = listed(&ann, &["inbox", "--all"]);
    let line = all
        .lines()
        .find(|l| l.contains(&approved))
        .unwrap_or_default();
    assert!(
        line.contains("1 of 2 approvals (ann@example.com)") && line.contains("left"),
        "{all}"
    );
    assert_eq!(lines_with(&all, &denied), 1, "{all}");
    let bobs: Vec<serde_json::Value> = listed(&bob, &["inbox", "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(bobs.len(), 2, "{bobs:?}");
    let secs = bobs[0]["expires_in_seconds"].as_i64().unwrap();
    assert!((1..=1800).contains(&secs), "{bobs:?}");
    // sam submitted both: nothing waits for him, though both are open.
    let sams = listed(&sam, &["inbox"]);
    assert!(sams.contains("nothing waits for you"), "{sams}");
    assert_eq!(listed(&sam, &["inbox", "--all"]).lines().count(), 2);
    let on_two = listed(&sam, &["inbox", "--all", "--target", "node-02"]);
    assert_eq!(
        (lines_with(&on_two, &approved), lines_with(&on_two, &denied)),
        (0, 1),
        "{on_two}"
    );
    let (code, _, err) = run(&ann, &["inbox", "--action", "Host_*"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("INVALID_ARGUMENT") && err.contains("action"),
        "{err}"
    );
    let (code, out, err) = run(&bob, &["approve", &approved, "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let decided: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(decided["state"], "approved");
    assert_eq!(decided["decision"]["votes"].as_array().unwrap().len(), 2);

    let (code, out, err) = run(&bob, &["deny", &denied, "--comment", "not now"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("rejected"), "{out}");
    let (code, out, _) = run(&ann, &["inbox", "--json"]);
    assert_eq!(code, Some(0));
    assert!(out.trim().is_empty(), "nothing waits: {out}");

    let (code, out, err) = run(&admin_key, &["route", "delete", "restarts"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, _, err) = run(&admin_key, &["route", "delete", "restarts"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("NOT_FOUND"), "{err}");
}

#[test]
fn an_admin_puts_lists_and_deletes_model_profiles_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("countersign.toml"),
        "[[model.endpoints]]\nname = \"remote\"\nbase_url = \"http://127.0.0.1:9\"\n\
         model = \"big\"\n\n[[model.endpoints]]\nname = \"local\"\n\
         base_url = \"http://127.0.0.1:9\"\nmodel = \"qwen2.5-7b-instruct\"\n",
    )
    .unwrap();
    let server = serve_with(dir.path(), &["--config", "countersign.toml"]);
    let admin_key = admin_key(dir.path());
    let (ok, ann, err) = countersign(
        dir.path(),
        &[
            "admin", "key", "create", "--tenant", "default", "--role", "oncall", "--name", "ann",
        ],
        &[],
    );
    assert!(ok, "{err}");
    let run = |key: &str, args: &[&str]| {
        let env = [
            ("COUNTERSIGN_ENDPOINT", server.endpoint.as_str()),
            ("COUNTERSIGN_API_KEY", key.trim()),
        ];
        exit_of(dir.path(), args, &env)
    };
    std::fs::write(
        dir.path().join("profile.yaml"),
        "id: db-changes\nmatch:\n  actions: [\"db_*\"]\n  classes: [destructive]\n\
         endpoint: local\non_unsure: escalate\ncalls_per_minute: 30\n",
    )
    .unwrap();
    let put = ["model-profile", "put", "-f", "profile.yaml"];
    let (code, out, err) = run(&ann, &put);
    assert_eq!(code, Some(1), "only admins: {out}");
    assert!(err.contains("PERMISSION_DENIED"), "{err}");
    let (code, out, err) = run(&admin_key, &put);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("db-changes") && out.contains("on local") && out.contains("unsure: escalate"),
        "{out}"
    );

    // A URL (or any name the server does not configure) is refused, naming
    // the field and the endpoints there are.
    std::fs::write(
        dir.path().join("url.yaml"),
        "id: sneaky\nendpoint: http://169.254.169.254/latest/meta-data/\n",
    )
    .unwrap();
    let (code, out, err) = run(&admin_key, &["model-profile", "put", "-f", "url.yaml"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        err.contains("INVALID_ARGUMENT")
            && err.contains("profile.endpoint")
            && err.contains("configured: local, remote"),
        "{err}"
    );

    let (code, out, err) = run(&admin_key, &["model-profile", "list", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let listed: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(listed["id"], "db-changes");
    assert_eq!(listed["endpoint"], "local");
    assert_eq!(listed["on_unsure"], "escalate");
    assert_eq!(listed["calls_per_minute"], 30);
    assert_eq!(
        listed["match"]["classes"],
        serde_json::json!(["destructive"])
    );

    let (code, out, err) = run(&admin_key, &["model-profile", "delete", "db-changes"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("db-changes"), "{out}");
    let (code, _, err) = run(&admin_key, &["model-profile", "delete", "db-changes"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("NOT_FOUND"), "{err}");
    let (code, out, _) = run(&admin_key, &["model-profile", "list"]);
    assert_eq!(code, Some(0));
    assert!(out.trim().is_empty(), "{out}");
}

#[test]
fn an_approvals_receipt_is_verified_offline_for_exactly_the_spec_that_runs() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let admin_key = admin_key(dir.path());
    let admin = [
        ("COUNTERSIGN_ENDPOINT", server.endpoint.as_str()),
        ("COUNTERSIGN_API_KEY", admin_key.as_str()),
    ];
    std::fs::write(
        dir.path().join("sop.yaml"),
        "id: SOP-1\naction: host_restart_service\ntitle: Restart\n\
         rollback_path: start it\nmax_blast_radius: single_device\n",
    )
    .unwrap();
    assert!(countersign(dir.path(), &["sop", "put", "-f", "sop.yaml"], &admin).0);
    let put = ["target", "put", "node-01", "--status", "online"];
    assert!(countersign(dir.path(), &put, &admin).0);
    let spec = "action: host_restart_service\nclass: write\ntarget: node-01\n\
                blast_radius: single_device\nreason: nginx OOM\nidempotency_key: k-1\n";
    std::fs::write(dir.path().join("spec.yaml"), spec).unwrap();
    std::fs::write(
        dir.path().join("other.yaml"),
        spec.replace("nginx OOM", "something else"),
    )
    .unwrap();
    let (ok, out, err) = countersign(
        dir.path(),
        &["submit", "-f", "spec.yaml", "--wait", "--json"],
        &admin,
    );
    assert!(ok, "{out}{err}");
    std::fs::write(dir.path().join("approved.json"), &out).unwrap();
    let (ok, public_key, err) = countersign(dir.path(), &["admin", "signing-key", "show"], &[]);
    assert!(ok, "{err}");
    let public_key = public_key.trim().to_owned();

    let verify = |file: &str, extra: &[&str]| {
        let mut args = vec!["receipt", "verify", file, "--public-key", &public_key];
        args.extend_from_slice(extra);
        exit_of(dir.path(), &args, &[])
    };
    let (code, out, err) = verify(
        "approved.json",
        &["--spec", "spec.yaml", "--tenant", "default"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("ok: approval of proposal"), "{out}");

    let (code, _, err) = verify("approved.json", &["--spec", "other.yaml"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("another spec"), "{err}");
    let (code, _, err) = verify("approved.json", &["--tenant", "acme"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("tenant"), "{err}");

    // One changed byte of what was signed.
    let approved: serde_json::Value =
        serde_json::from_str(&out_of(dir.path(), "approved.json")).unwrap();
    let mut receipt = approved["decision"]["receipt"].clone();
    receipt["expires_at"] = (receipt["expires_at"].as_i64().unwrap() + 1).into();
    std::fs::write(dir.path().join("forged.json"), receipt.to_string()).unwrap();
    let (code, _, err) = verify("forged.json", &[]);
    assert_eq!(code, Some(1));
    assert!(err.contains("signature"), "{err}");
    drop(server);
}

fn out_of(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap()
}
