//! Generated protobuf types and gRPC services of `proto/admission/v1/admission.proto` and of
//! Envoy's rate limit and external processing services (`proto/envoy`, in [`envoy`]), and the
//! codec they use.
#![allow(clippy::all, missing_docs)]

tonic::include_proto!("admission.v1");

/// Envoy's rate limit and external processing services and the messages they use, under
/// Envoy's package names.
pub mod envoy {
    pub mod service {
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }
        pub mod ext_proc {
            pub mod v3 {
                tonic::include_proto!("envoy.service.ext_proc.v3");
            }
        }
    }
    pub mod extensions {
        pub mod common {
            pub mod ratelimit {
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                }
            }
        }
    }
    pub mod config {
        pub mod core {
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }
    pub mod r#type {
        pub mod v3 {
            tonic::include_proto!("envoy.r#type.v3");
        }
    }
}

/// The encoded descriptor set (with source comments) that server reflection serves.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("admission_descriptor");

pub mod codec {
    //! Prost encoding with 512-byte starting buffers instead of tonic's 8 KiB. Every message of
    //! this API is far smaller (buffers still grow when one is not), and each open Wait stream
    //! keeps its encode buffer for as long as it is open: with 10,000 streams that is 80 MB of
    //! default buffers.
    use std::marker::PhantomData;

    use tonic::Status;
    use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
    use tonic_prost::ProstCodec;

    const BUFFER_SIZE: usize = 512;
    const YIELD_THRESHOLD: usize = 32 * 1024;

    #[derive(Debug, Clone, Copy)]
    pub struct SmallBufferCodec<T, U>(PhantomData<(T, U)>);

    impl<T, U> Default for SmallBufferCodec<T, U> {
        fn default() -> Self {
            SmallBufferCodec(PhantomData)
        }
    }

    impl<T, U> Codec for SmallBufferCodec<T, U>
    where
        T: prost::Message + Send + 'static,
        U: prost::Message + Default + Send + 'static,
    {
        type Encode = T;
        type Decode = U;
        type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
        type Decoder = BadBytesDecoder<<ProstCodec<T, U> as Codec>::Decoder>;

        fn encoder(&mut self) -> Self::Encoder {
            ProstCodec::<T, U>::raw_encoder(BufferSettings::new(BUFFER_SIZE, YIELD_THRESHOLD))
        }

        fn decoder(&mut self) -> Self::Decoder {
            BadBytesDecoder(ProstCodec::<T, U>::raw_decoder(BufferSettings::new(
                BUFFER_SIZE,
                YIELD_THRESHOLD,
            )))
        }
    }

    /// Prost's decoder, with a message that does not decode (invalid UTF-8 in a string, a wrong
    /// wire type, a truncated length) answered INVALID_ARGUMENT instead of INTERNAL: the
    /// caller sent bad bytes, the server did not fail.
    #[derive(Debug)]
    pub struct BadBytesDecoder<D>(D);

    impl<D: Decoder<Error = Status>> Decoder for BadBytesDecoder<D> {
        type Item = D::Item;
        type Error = Status;

        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<D::Item>, Status> {
            self.0.decode(buf).map_err(|e| {
                if e.code() == tonic::Code::Internal {
                    Status::invalid_argument(format!(
                        "request: not a valid protobuf message of this RPC: {}",
                        e.message()
                    ))
                } else {
                    e
                }
            })
        }

        fn buffer_settings(&self) -> BufferSettings {
            self.0.buffer_settings()
        }
    }
}
