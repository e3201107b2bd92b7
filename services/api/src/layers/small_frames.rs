//! `small_frames`: the answer of a unary RPC of ours, when its message is at
//! most [`MAX_SPLIT`] bytes, goes out as HTTP/2 DATA frames shorter than
//! [`PIECE`] bytes each. h2 copies frames that short into its write buffer;
//! a longer one it holds aside to write vectored, and it flushes before it
//! buffers anything after that one, so the trailers (`grpc-status`) of a
//! one-message answer would leave in a write of their own: a second syscall
//! per call and, on the other end, a second wake-up and read. Split, the
//! headers, the message and the trailers leave in one write. The bytes of
//! the message are the same (the gRPC length prefix stays in front of them;
//! HTTP/2 frames carry no message boundaries). Larger answers and streams
//! pass as they are.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use countersign_proto::rpc::Kind;
use http_body::{Body, Frame, SizeHint};
use tonic::Status;
use tower::{Layer, Service};

use super::{Request, Resolved, Response};

/// h2 buffers a DATA frame below this length (its chaining threshold with
/// vectored writes; without them it is 1024) by copying it.
pub const PIECE: usize = 256;

/// Messages up to this long (with their 5-byte gRPC prefix) are split: at
/// most 17 frames.
pub const MAX_SPLIT: usize = 4096;

#[derive(Debug, Clone, Copy, Default)]
pub struct SmallFramesLayer;

impl<S> Layer<S> for SmallFramesLayer {
    type Service = SmallFrames<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SmallFrames { inner }
    }
}

#[derive(Debug, Clone)]
pub struct SmallFrames<S> {
    inner: S,
}

impl<S, E> Service<Request> for SmallFrames<S>
where
    S: Service<Request, Response = Response, Error = E>,
{
    type Response = Response;
    type Error = E;
    type Future = Splitting<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let split = Resolved::of(&req).is_some_and(|rpc| {
            !rpc.is_public() && matches!(rpc.kind, Kind::Unary | Kind::LongPoll)
        });
        Splitting {
            inner: self.inner.call(req),
            split,
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner service's answer, its body split if it is to be.
    pub struct Splitting<F> {
        #[pin]
        inner: F,
        split: bool,
    }
}

impl<F, E> Future for Splitting<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = ready!(this.inner.poll(cx));
        let split = *this.split;
        Poll::Ready(answer.map(|response| {
            if split {
                response.map(|body| {
                    tonic::body::Body::new(Pieces {
                        inner: body,
                        rest: Bytes::new(),
                    })
                })
            } else {
                response
            }
        }))
    }
}

pin_project_lite::pin_project! {
    /// A body whose short DATA frames come out in pieces under [`PIECE`]
    /// bytes; everything else as it is.
    struct Pieces {
        #[pin]
        inner: tonic::body::Body,
        // What is left of the frame being split.
        rest: Bytes,
    }
}

/// The next piece of `rest`, taken off its front.
fn piece(rest: &mut Bytes) -> Bytes {
    rest.split_to(rest.len().min(PIECE - 1))
}

impl Body for Pieces {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.project();
        if !this.rest.is_empty() {
            return Poll::Ready(Some(Ok(Frame::data(piece(this.rest)))));
        }
        let frame = match ready!(this.inner.poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            other => return Poll::Ready(other),
        };
        Poll::Ready(Some(Ok(match frame.into_data() {
            Ok(mut data) if data.len() >= PIECE && data.len() <= MAX_SPLIT => {
                let first = piece(&mut data);
                *this.rest = data;
                Frame::data(first)
            }
            Ok(data) => Frame::data(data),
            Err(frame) => frame,
        })))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::VecDeque, convert::Infallible};

    use tower::{ServiceExt, service_fn};

    use super::*;

    /// A body of the frames it is given.
    struct Given(VecDeque<Frame<Bytes>>);

    impl Body for Given {
        type Data = Bytes;
        type Error = Status;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_empty()
        }
    }

    /// The frames of the answer `SmallFrames` gives for `path` when the
    /// service answers `message` and then its trailers.
    async fn frames(path: &str, message: Vec<u8>) -> Vec<Frame<Bytes>> {
        let inner = service_fn(move |_req: Request| {
            let message = Bytes::from(message.clone());
            async move {
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", "0".parse().unwrap());
                let body = Given([Frame::data(message), Frame::trailers(trailers)].into());
                Ok::<_, Infallible>(http::Response::new(tonic::body::Body::new(body)))
            }
        });
        let request = http::Request::builder()
            .uri(path)
            .extension(Resolved(countersign_proto::rpc::find(path)))
            .body(tonic::body::Body::empty())
            .unwrap();
        let mut body = SmallFramesLayer
            .layer(inner)
            .oneshot(request)
            .await
            .unwrap()
            .into_body();
        let mut frames = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            frames.push(frame.unwrap());
        }
        assert!(body.is_end_stream());
        frames
    }

    fn data(frames: &[Frame<Bytes>]) -> Vec<usize> {
        frames
            .iter()
            .filter_map(|f| f.data_ref().map(Bytes::len))
            .collect()
    }

    const SUBMIT: &str = "/countersign.v1.ProposalService/Submit";

    #[tokio::test]
    async fn a_short_answer_comes_in_pieces_h2_copies_with_its_bytes_and_trailers_intact() {
        let message: Vec<u8> = (0..1181u32).map(|i| (i % 251) as u8).collect();
        let frames = frames(SUBMIT, message.clone()).await;
        assert_eq!(data(&frames), [255, 255, 255, 255, 161]);
        let joined: Vec<u8> = frames
            .iter()
            .filter_map(Frame::data_ref)
            .flat_map(|d| d.iter().copied())
            .collect();
        assert_eq!(joined, message);
        let trailers = frames.last().and_then(Frame::trailers_ref).unwrap();
        assert_eq!(trailers["grpc-status"], "0");
    }

    #[tokio::test]
    async fn what_h2_copies_anyway_long_answers_streams_and_public_rpcs_pass_whole() {
        assert_eq!(data(&frames(SUBMIT, vec![7; 255]).await), [255]);
        assert_eq!(data(&frames(SUBMIT, vec![7; 5000]).await), [5000]);
        let watch = "/countersign.v1.NotificationService/Watch";
        assert_eq!(data(&frames(watch, vec![7; 1000]).await), [1000]);
        let health = "/grpc.health.v1.Health/Check";
        assert_eq!(data(&frames(health, vec![7; 1000]).await), [1000]);
        assert_eq!(
            data(&frames("/nope.Service/Nope", vec![7; 1000]).await),
            [1000]
        );
    }
}
