//! [`RequestCodec`]: the servers' codec. It is prost's, except that a request
//! that does not decode (garbage bytes, a string that is not UTF-8, a field of
//! the wrong wire type) is the caller's error: INVALID_ARGUMENT naming what
//! failed to decode, where prost's codec answers INTERNAL.

use std::marker::PhantomData;

use prost::Message;
use tonic::{
    Status,
    codec::{Codec, DecodeBuf, Decoder},
};
use tonic_prost::{ProstCodec, ProstEncoder};

/// Encodes answers as prost does; decodes requests as [`RequestDecoder`].
#[derive(Debug, Clone)]
pub struct RequestCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for RequestCodec<T, U> {
    fn default() -> Self {
        RequestCodec(PhantomData)
    }
}

impl<T, U> Codec for RequestCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = RequestDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder(PhantomData)
    }
}

/// Decodes a request message; what does not decode is INVALID_ARGUMENT.
#[derive(Debug, Clone)]
pub struct RequestDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for RequestDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf).map(Some).map_err(undecodable)
    }
}

fn undecodable(error: prost::DecodeError) -> Status {
    Status::invalid_argument(format!("the request does not decode: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1;

    #[test]
    fn what_does_not_decode_is_an_invalid_argument() {
        // Field 1 (the spec), length-delimited, claiming more bytes than follow.
        let error = v1::SubmitRequest::decode(&[0x0a, 0x7f, 0x01][..]).unwrap_err();
        let status = undecodable(error);
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().starts_with("the request does not decode"));
    }
}
