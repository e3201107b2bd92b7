//! The `countersign.v1` contract: generated messages, clients and servers;
//! conversions to and from domain types; and the one table that maps an error
//! kind to a gRPC code.

pub mod client;
pub mod codec;
pub mod convert;
pub mod rpc;
pub mod status;

#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("countersign.v1");
    include!(concat!(env!("OUT_DIR"), "/servers/countersign.v1.rs"));
}

/// The encoded descriptor set that the reflection service serves.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/countersign_descriptor.bin"));

pub use status::{OrStatus, to_status};
