//! A unary call whose request is encoded once, before the loop, and whose
//! answer is decoded into only the fields the tally reads. The load
//! generator shares the machine with the server: what it spends a call
//! beyond the transport's own work is CPU the server does not get, so a
//! scenario that compares a call with the health-check floor makes both
//! calls at about the same cost to the generator. The server still decodes
//! the whole request and encodes the whole answer.

use std::marker::PhantomData;

use countersign_proto::client::BearerAuth;
use prost::{
    Message,
    bytes::{BufMut, Bytes},
};
use tonic::{
    Status,
    codec::{Codec, EncodeBuf, Encoder},
    codegen::http::uri::PathAndQuery,
    service::interceptor::InterceptedService,
    transport::Channel,
};
use tonic_prost::ProstDecoder;

use crate::scenario::channel;

/// `Submit`'s path.
pub(crate) const SUBMIT: &str = "/countersign.v1.ProposalService/Submit";

/// What `Submit` answered, as far as the tally reads it: the rest of
/// `SubmitResponse` (the proposal and its decision) is skipped unread.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct SubmitAnswer {
    #[prost(bool, tag = "3")]
    pub suppressed: bool,
}

/// One connection's caller of one method with one request, already encoded.
#[derive(Clone)]
pub(crate) struct EncodedCall<A> {
    grpc: tonic::client::Grpc<InterceptedService<Channel, BearerAuth>>,
    path: PathAndQuery,
    body: Bytes,
    answer: PhantomData<fn() -> A>,
}

impl<A: Message + Default + Send + 'static> EncodedCall<A> {
    /// A connection of its own to `endpoint`, authenticated with `key`, that
    /// sends `request` to `path` (`/countersign.v1.ProposalService/Submit`).
    pub(crate) async fn connect(
        endpoint: &str,
        key: &str,
        path: &'static str,
        request: &impl Message,
    ) -> anyhow::Result<Self> {
        let service = InterceptedService::new(channel(endpoint).await?, BearerAuth::new(key)?);
        Ok(EncodedCall {
            grpc: tonic::client::Grpc::new(service),
            path: PathAndQuery::from_static(path),
            body: request.encode_to_vec().into(),
            answer: PhantomData,
        })
    }

    pub(crate) async fn call(&mut self) -> Result<A, Status> {
        self.grpc
            .ready()
            .await
            .map_err(|e| Status::unavailable(format!("the connection is not ready: {e}")))?;
        let request = tonic::Request::new(self.body.clone());
        let codec = EncodedCodec::<A>(PhantomData);
        Ok(self
            .grpc
            .unary(request, self.path.clone(), codec)
            .await?
            .into_inner())
    }
}

/// Sends the encoded bytes as they are; decodes the answer with prost.
struct EncodedCodec<A>(PhantomData<fn() -> A>);

impl<A: Message + Default + Send + 'static> Codec for EncodedCodec<A> {
    type Encode = Bytes;
    type Decode = A;
    type Encoder = BytesEncoder;
    type Decoder = ProstDecoder<A>;

    fn encoder(&mut self) -> Self::Encoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
    }
}

struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use countersign_proto::{rpc, v1};
    use prost::Message;

    use super::{SUBMIT, SubmitAnswer};

    #[test]
    fn the_submit_path_is_the_contracts() {
        let rpc = rpc::find(SUBMIT).expect("an RPC of the contract");
        assert_eq!(
            (rpc.service, rpc.method),
            ("countersign.v1.ProposalService", "Submit")
        );
    }

    #[test]
    fn the_answer_reads_suppressed_from_a_whole_submit_response() {
        for suppressed in [true, false] {
            let whole = v1::SubmitResponse {
                proposal: Some(v1::Proposal {
                    id: "p".into(),
                    state: v1::ProposalState::Rejected as i32,
                    ..Default::default()
                }),
                deduplicated: !suppressed,
                suppressed,
            };
            let read = SubmitAnswer::decode(whole.encode_to_vec().as_slice()).expect("decodes");
            assert_eq!(read.suppressed, suppressed);
        }
    }
}
