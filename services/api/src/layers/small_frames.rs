//! `small_frames`: the answer of a unary RPC of ours, when its message is at
//! most [`MAX_SPLIT`] bytes, goes out as HTTP/2 DATA frames shorter than
//! [`PIECE`] bytes each. h2 copies frames that short into its write buffer;
//! a longer one it holds aside to write after the buffer, and it flushes
//! before it buffers anything after that one, so the trailers
//! (`grpc-status`) of a one-message answer would leave in a write of their
//! own: a second syscall per call and, on the other end, a second wake-up
//! and read. Split, the headers, the message and the trailers leave in one
//! write. The bytes of the message are the same (the gRPC length prefix
//! stays in front of them; HTTP/2 frames carry no message boundaries).
//! Larger answers and streams pass as they are.
//!
//! How short "short" is depends on the connection: h2 copies frames under
//! 256 bytes on one that writes vectored, under 1,024 on one that does not.
//! The API's connections are [`CopiedWrites`], which tell h2 they do not: a
//! decision's answer of 2–3 KB then leaves in three frames instead of ten,
//! and every frame is work on both ends (h2's queues and flow control, the
//! client's decoder). What h2 still writes after its buffer (a frame of
//! 1,024 bytes or more: an answer over [`MAX_SPLIT`], a stream's large
//! message) takes two writes instead of one vectored write.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use countersign_proto::rpc::Kind;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::{Status, transport::server::Connected};
use tower::{Layer, Service};

use super::{Request, Resolved, Response};

/// h2 buffers a DATA frame below this length by copying it, on a connection
/// that does not write vectored ([`CopiedWrites`]; 256 on one that does).
pub const PIECE: usize = 1024;

/// Messages up to this long (with their 5-byte gRPC prefix) are split: at
/// most 9 frames, which h2's 16 KiB write buffer takes with the answer's
/// headers and trailers.
pub const MAX_SPLIT: usize = 8192;

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

pin_project_lite::pin_project! {
    /// A connection that tells h2 it does not write vectored, so h2 copies
    /// DATA frames under [`PIECE`] bytes into its write buffer (see the
    /// module's documentation); everything else is the connection's own.
    pub struct CopiedWrites<T> {
        #[pin]
        inner: T,
    }
}

impl<T> CopiedWrites<T> {
    pub fn new(inner: T) -> CopiedWrites<T> {
        CopiedWrites { inner }
    }
}

impl<T: AsyncRead> AsyncRead for CopiedWrites<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.project().inner.poll_read(cx, buf)
    }
}

impl<T: AsyncWrite> AsyncWrite for CopiedWrites<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }
}

impl<T: Connected> Connected for CopiedWrites<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use std::{
        collections::VecDeque,
        convert::Infallible,
        sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        },
    };

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
        assert_eq!(data(&frames), [1023, 158]);
        let joined: Vec<u8> = frames
            .iter()
            .filter_map(Frame::data_ref)
            .flat_map(|d| d.iter().copied())
            .collect();
        assert_eq!(joined, message);
        let trailers = frames.last().and_then(Frame::trailers_ref).unwrap();
        assert_eq!(trailers["grpc-status"], "0");
    }

    /// One end of a connection that writes vectored, as a TCP socket does,
    /// counting its writes.
    struct Counted {
        inner: tokio::io::DuplexStream,
        writes: Arc<AtomicUsize>,
    }

    impl AsyncRead for Counted {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Counted {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Pin::new(&mut self.inner).poll_write(cx, buf)
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            let joined: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            Pin::new(&mut self.inner).poll_write(cx, &joined)
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// The writes an h2 server makes on `wrap` of its end of a connection to
    /// answer one call: headers, a message of `len` bytes in this module's
    /// pieces, trailers.
    async fn writes_of_an_answer<T>(len: usize, wrap: fn(Counted) -> T) -> usize
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (client_end, server_end) = tokio::io::duplex(1 << 20);
        let writes = Arc::new(AtomicUsize::new(0));
        let server_end = wrap(Counted {
            inner: server_end,
            writes: writes.clone(),
        });
        let counted = writes.clone();
        let (answered_at, answered) = tokio::sync::oneshot::channel();
        let server = tokio::spawn(async move {
            let mut connection = h2::server::handshake(server_end).await.unwrap();
            let (_request, mut respond) = connection.accept().await.unwrap().unwrap();
            let before = writes.load(Ordering::SeqCst);
            // The whole answer is queued before the connection writes any
            // of it, as one poll of a unary answer's body queues it.
            let mut stream = respond
                .send_response(http::Response::new(()), false)
                .unwrap();
            let mut rest = Bytes::from(vec![7u8; len]);
            while !rest.is_empty() {
                stream.send_data(piece(&mut rest), false).unwrap();
            }
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", "0".parse().unwrap());
            stream.send_trailers(trailers).unwrap();
            let _ = answered_at.send(before);
            while connection.accept().await.is_some() {}
        });
        let (mut client, connection) = h2::client::handshake(client_end).await.unwrap();
        tokio::spawn(connection);
        let request = http::Request::get("http://countersign/x").body(()).unwrap();
        let (response, _) = client.send_request(request, true).unwrap();
        let mut body = response.await.unwrap().into_body();
        let mut received = 0;
        while let Some(data) = body.data().await {
            let data = data.unwrap();
            received += data.len();
            let _ = body.flow_control().release_capacity(data.len());
        }
        let trailers = body.trailers().await.unwrap().unwrap();
        assert_eq!(received, len);
        assert_eq!(trailers["grpc-status"], "0");
        let before = answered.await.unwrap();
        let answer = counted.load(Ordering::SeqCst) - before;
        server.abort();
        answer
    }

    #[tokio::test]
    async fn on_the_apis_connections_an_answer_in_pieces_leaves_in_one_write() {
        // A decision's answer is 2–3 KB: three pieces.
        for len in [1181, 2600, MAX_SPLIT] {
            assert_eq!(
                writes_of_an_answer(len, CopiedWrites::new).await,
                1,
                "{len} bytes"
            );
        }
        // The same pieces on a connection that writes vectored: h2 holds
        // each aside and writes it on its own.
        assert!(writes_of_an_answer(2600, |counted| counted).await >= 3);
    }

    #[tokio::test]
    async fn what_h2_copies_anyway_long_answers_streams_and_public_rpcs_pass_whole() {
        assert_eq!(data(&frames(SUBMIT, vec![7; 1023]).await), [1023]);
        assert_eq!(data(&frames(SUBMIT, vec![7; 9000]).await), [9000]);
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
