//! Generates the gRPC server and client code from `proto/` and writes the encoded descriptor set
//! (with comments) that server reflection serves, so grpcurl `describe` shows the proto comments.
use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // No protoc on the machine: use the vendored binary unless the caller names one.
    if env::var_os("PROTOC").is_none() {
        // SAFETY-free: build scripts are single-threaded at this point.
        unsafe { env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    }
    let out = PathBuf::from(env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .codec_path("crate::api::codec::SmallBufferCodec")
        .file_descriptor_set_path(out.join("admission_descriptor.bin"))
        .compile_protos(
            &[
                "proto/admission/v1/admission.proto",
                "proto/envoy/service/ratelimit/v3/rls.proto",
                "proto/envoy/service/ext_proc/v3/external_processor.proto",
            ],
            &["proto"],
        )?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
