//! Compiles `proto/countersign/v1` with protox (no `protoc` needed) and generates
//! the tonic services, plus the encoded descriptor set that reflection serves.
//! Two passes: the messages and clients with prost's codec, then the servers
//! alone (over the same messages) with `codec::RequestCodec`, which answers a
//! request that does not decode INVALID_ARGUMENT where prost's codec says
//! INTERNAL; a client that cannot decode an answer keeps prost's INTERNAL.
//!
//! From the same descriptor set it writes the RPC table (`rpcs.rs`, see
//! `src/rpc.rs`): every method of every service, with its path, its span name
//! and its kind.

use std::{env, error::Error, fmt::Write as _, fs, path::PathBuf};

use prost::Message;
use prost_types::FileDescriptorSet;

const PROTOS: &[&str] = &[
    "countersign/v1/types.proto",
    "countersign/v1/proposal_service.proto",
    "countersign/v1/reference_services.proto",
    "countersign/v1/notification_service.proto",
    "countersign/v1/audit_service.proto",
    "countersign/v1/policy_service.proto",
    "countersign/v1/escalation_service.proto",
];

/// Unary methods that wait for something on purpose (`service/method`): the
/// timeout layer lets them run as long as their caller asks, up to a ceiling.
/// `Submit` is one, since it may wait for its decision (`wait_for_decision`).
/// The build fails on a name that is not a unary method of the protos.
const LONG_POLLS: &[&str] = &[
    "countersign.v1.ProposalService/Submit",
    "countersign.v1.ProposalService/AwaitDecision",
];

/// The public services every role serves beside ours, which need no
/// credential and get no span: `(service, method, kind)`. Their descriptors
/// come with tonic-health and tonic-reflection; the api crate's tests check
/// this list against them.
const PUBLIC: &[(&str, &str, &str)] = &[
    ("grpc.health.v1.Health", "Check", "Unary"),
    ("grpc.health.v1.Health", "Watch", "ServerStream"),
    (
        "grpc.reflection.v1.ServerReflection",
        "ServerReflectionInfo",
        "BidiStream",
    ),
    (
        "grpc.reflection.v1alpha.ServerReflection",
        "ServerReflectionInfo",
        "BidiStream",
    ),
];

fn main() -> Result<(), Box<dyn Error>> {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files: Vec<PathBuf> = PROTOS.iter().map(|p| root.join(p)).collect();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let descriptors = protox::compile(&files, [&root])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out.join("countersign_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    fs::write(out.join("rpcs.rs"), rpc_table(&descriptors)?)?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(descriptors.clone())?;
    let servers = out.join("servers");
    fs::create_dir_all(&servers)?;
    tonic_prost_build::configure()
        .build_client(false)
        .extern_path(".countersign.v1", "crate::v1")
        .codec_path("crate::codec::RequestCodec")
        .out_dir(servers)
        .compile_fds(descriptors)?;
    Ok(())
}

/// One row of the table.
struct Row {
    service: String,
    method: String,
    span: Option<String>,
    kind: &'static str,
}

/// `RPCS`, `find` and the `rpc_span!` macro, as Rust source.
fn rpc_table(descriptors: &FileDescriptorSet) -> Result<String, Box<dyn Error>> {
    let mut rows = Vec::new();
    let mut long_polls_found = Vec::new();
    for file in &descriptors.file {
        for service in &file.service {
            let full = format!("{}.{}", file.package(), service.name());
            for method in &service.method {
                let name = format!("{full}/{}", method.name());
                let long_poll = LONG_POLLS.contains(&name.as_str());
                let kind = match (method.client_streaming(), method.server_streaming()) {
                    (false, false) if long_poll => "LongPoll",
                    (false, false) => "Unary",
                    (false, true) => "ServerStream",
                    (true, false) => "ClientStream",
                    (true, true) => "BidiStream",
                };
                if long_poll {
                    if kind != "LongPoll" {
                        return Err(format!("LONG_POLLS names {name}, which streams").into());
                    }
                    long_polls_found.push(name.clone());
                }
                let short = service
                    .name()
                    .strip_suffix("Service")
                    .unwrap_or(service.name());
                rows.push(Row {
                    span: Some(format!("api.{}.{}", snake(short), snake(method.name()))),
                    service: full.clone(),
                    method: method.name().to_owned(),
                    kind,
                });
            }
        }
    }
    if let Some(missing) = LONG_POLLS
        .iter()
        .find(|n| !long_polls_found.contains(&(**n).to_owned()))
    {
        return Err(format!("LONG_POLLS names {missing}, which no proto defines").into());
    }
    for (service, method, kind) in PUBLIC {
        rows.push(Row {
            service: (*service).to_owned(),
            method: (*method).to_owned(),
            span: None,
            kind,
        });
    }

    let mut src =
        String::from("/// Every RPC, ours (from the descriptor set) and the public ones.\n");
    src.push_str("pub static RPCS: &[Rpc] = &[\n");
    for (index, row) in rows.iter().enumerate() {
        let span = row
            .span
            .as_ref()
            .map_or("None".to_owned(), |s| format!("Some({s:?})"));
        let access = if row.span.is_some() {
            "Credential"
        } else {
            "Public"
        };
        writeln!(
            src,
            "    Rpc {{ index: {index}, path: \"/{}/{}\", service: {:?}, method: {:?}, \
             span: {span}, kind: Kind::{}, access: Access::{access} }},",
            row.service, row.method, row.service, row.method, row.kind
        )?;
    }
    src.push_str("];\n\n");
    src.push_str(
        "/// The RPC answering `path` (`/package.Service/Method`), if it is one of them.\n\
         pub fn find(path: &str) -> Option<&'static Rpc> {\n    match path {\n",
    );
    for (index, row) in rows.iter().enumerate() {
        writeln!(
            src,
            "        \"/{}/{}\" => Some(&RPCS[{index}]),",
            row.service, row.method
        )?;
    }
    src.push_str("        _ => None,\n    }\n}\n\n");
    src.push_str(
        "/// `$make!(\"api.service.method\")` for an RPC with a span, else `$otherwise`:\n\
         /// one call site per span name, as `tracing` needs a static name at each.\n\
         #[macro_export]\nmacro_rules! rpc_span {\n    ($rpc:expr, $make:ident, $otherwise:expr) => {\n        \
         match $rpc.index {\n",
    );
    for (index, row) in rows.iter().enumerate() {
        if let Some(span) = &row.span {
            writeln!(src, "            {index} => $make!({span:?}),")?;
        }
    }
    src.push_str("            _ => $otherwise,\n        }\n    };\n}\n");
    Ok(src)
}

/// `GetProposal` -> `get_proposal`.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
