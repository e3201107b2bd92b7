//! The kinds of failure every layer speaks in. The proto crate holds the one
//! table that turns a kind into a gRPC code.

/// What went wrong, as a caller should see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Unauthenticated,
    PermissionDenied,
    NotFound,
    InvalidArgument,
    AlreadyExists,
    FailedPrecondition,
    ResourceExhausted,
    DeadlineExceeded,
    OutOfRange,
    Unavailable,
    Internal,
}

/// An error that knows which [`ErrorKind`] it is and what a caller may be told.
pub trait ServiceError: std::error::Error {
    fn kind(&self) -> ErrorKind;

    /// The message a caller sees. Internal errors never leak their details.
    fn public_message(&self) -> String {
        match self.kind() {
            ErrorKind::Internal => "internal error".to_owned(),
            _ => self.to_string(),
        }
    }
}
