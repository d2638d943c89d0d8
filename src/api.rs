//! Generated protobuf types and gRPC services of `proto/admission/v1/admission.proto`.
#![allow(clippy::all, missing_docs)]

tonic::include_proto!("admission.v1");

/// The encoded descriptor set (with source comments) that server reflection serves.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("admission_descriptor");
