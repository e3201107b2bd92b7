//! Compiles `proto/countersign/v1` with protox (no `protoc` needed) and generates
//! the tonic services, plus the encoded descriptor set that reflection serves.
//! Two passes: the messages and clients with prost's codec, then the servers
//! alone (over the same messages) with `codec::RequestCodec`, which answers a
//! request that does not decode INVALID_ARGUMENT where prost's codec says
//! INTERNAL; a client that cannot decode an answer keeps prost's INTERNAL.

use std::{env, error::Error, fs, path::PathBuf};

use prost::Message;

const PROTOS: &[&str] = &[
    "countersign/v1/types.proto",
    "countersign/v1/proposal_service.proto",
    "countersign/v1/reference_services.proto",
    "countersign/v1/notification_service.proto",
    "countersign/v1/audit_service.proto",
    "countersign/v1/policy_service.proto",
    "countersign/v1/escalation_service.proto",
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
