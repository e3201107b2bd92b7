//! Compiles `proto/countersign/v1` with protox (no `protoc` needed) and generates
//! the tonic services, plus the encoded descriptor set that reflection serves.

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
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
