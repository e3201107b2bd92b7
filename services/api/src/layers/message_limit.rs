//! `message_limit`: a request message larger than the limit is refused with
//! `RESOURCE_EXHAUSTED`, as gRPC has it, as soon as its frame header declares
//! its length and before any of it is buffered. (tonic's own limit, which
//! stays as a backstop, answers `OUT_OF_RANGE`: in this API that is a stale
//! Watch cursor.) Every frame of the request body is checked, so streaming
//! requests are held to the limit message by message.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use tonic::Status;
use tower::{Layer, Service};

/// A gRPC frame header: a compression flag and a big-endian u32 length.
const HEADER: usize = 5;

#[derive(Debug, Clone, Copy)]
pub struct MessageLimitLayer {
    max: usize,
}

impl MessageLimitLayer {
    /// Refuses request messages longer than `max` bytes.
    pub fn new(max: usize) -> Self {
        MessageLimitLayer { max }
    }
}

impl<S> Layer<S> for MessageLimitLayer {
    type Service = MessageLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        MessageLimit {
            inner,
            max: self.max,
        }
    }
}

#[derive(Debug, Clone)]
pub struct MessageLimit<S> {
    inner: S,
    max: usize,
}

impl<S> Service<http::Request<tonic::body::Body>> for MessageLimit<S>
where
    S: Service<http::Request<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let max = self.max;
        self.inner.call(req.map(|body| {
            tonic::body::Body::new(Limited {
                inner: body,
                frames: Frames::new(max),
            })
        }))
    }
}

/// Where the request body is in its sequence of gRPC frames.
#[derive(Debug)]
struct Frames {
    max: usize,
    header: [u8; HEADER],
    header_read: usize,
    /// Bytes of the current message still to pass.
    message_left: usize,
}

impl Frames {
    fn new(max: usize) -> Self {
        Frames {
            max,
            header: [0; HEADER],
            header_read: 0,
            message_left: 0,
        }
    }

    /// Follows `data` through the frames; the length of the first message
    /// over the limit is an error.
    fn scan(&mut self, mut data: &[u8]) -> Result<(), usize> {
        while !data.is_empty() {
            if self.message_left > 0 {
                let skip = self.message_left.min(data.len());
                self.message_left -= skip;
                data.advance(skip);
                continue;
            }
            let take = (HEADER - self.header_read).min(data.len());
            self.header[self.header_read..self.header_read + take].copy_from_slice(&data[..take]);
            self.header_read += take;
            data.advance(take);
            if self.header_read == HEADER {
                self.header_read = 0;
                let len =
                    u32::from_be_bytes(self.header[1..].try_into().expect("4 bytes")) as usize;
                if len > self.max {
                    return Err(len);
                }
                self.message_left = len;
            }
        }
        Ok(())
    }
}

pin_project_lite::pin_project! {
    /// A request body that ends in `RESOURCE_EXHAUSTED` at the header of a
    /// message over the limit.
    struct Limited {
        #[pin]
        inner: tonic::body::Body,
        frames: Frames,
    }
}

impl Body for Limited {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.project();
        let frame = match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if let Some(data) = frame.data_ref()
            && let Err(len) = this.frames.scan(data)
        {
            return Poll::Ready(Some(Err(Status::resource_exhausted(format!(
                "the request message is {len} bytes; the limit is {} bytes",
                this.frames.max
            )))));
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: u32) -> Vec<u8> {
        let mut bytes = vec![0];
        bytes.extend_from_slice(&len.to_be_bytes());
        bytes.extend(std::iter::repeat_n(7, len as usize));
        bytes
    }

    #[test]
    fn messages_at_the_limit_pass_in_any_chunking() {
        let mut stream = frame(10);
        stream.extend(frame(0));
        stream.extend(frame(3));
        for chunk in 1..stream.len() {
            let mut frames = Frames::new(10);
            for piece in stream.chunks(chunk) {
                assert_eq!(frames.scan(piece), Ok(()), "chunks of {chunk}");
            }
        }
    }

    #[test]
    fn a_header_over_the_limit_is_caught_however_it_is_split() {
        let mut stream = frame(2);
        stream.extend_from_slice(&[0, 0, 0, 0, 11]);
        for chunk in 1..stream.len() {
            let mut frames = Frames::new(10);
            let refused = stream
                .chunks(chunk)
                .map(|piece| frames.scan(piece))
                .find(Result::is_err);
            assert_eq!(refused, Some(Err(11)), "chunks of {chunk}");
        }
        // A length that no message could have (4 GiB - 1) too.
        assert_eq!(
            Frames::new(10).scan(&[0, 255, 255, 255, 255]),
            Err(u32::MAX as usize)
        );
    }
}
