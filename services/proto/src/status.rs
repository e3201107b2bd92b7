//! The one table from [`ErrorKind`] to [`tonic::Code`].

use countersign_domain::{ErrorKind, ServiceError};
use tonic::{Code, Status};

pub fn code(kind: ErrorKind) -> Code {
    match kind {
        ErrorKind::Unauthenticated => Code::Unauthenticated,
        ErrorKind::PermissionDenied => Code::PermissionDenied,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::InvalidArgument => Code::InvalidArgument,
        ErrorKind::AlreadyExists => Code::AlreadyExists,
        ErrorKind::FailedPrecondition => Code::FailedPrecondition,
        ErrorKind::ResourceExhausted => Code::ResourceExhausted,
        ErrorKind::DeadlineExceeded => Code::DeadlineExceeded,
        ErrorKind::OutOfRange => Code::OutOfRange,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::Internal => Code::Internal,
    }
}

/// Turns any service error into the status a caller sees.
pub fn to_status(err: &(impl ServiceError + ?Sized)) -> Status {
    Status::new(code(err.kind()), err.public_message())
}

#[cfg(test)]
mod tests {
    use countersign_domain::FieldError;

    use super::*;

    #[test]
    fn a_field_error_is_invalid_argument_naming_the_field() {
        let status = to_status(&FieldError::new("spec.action", "must not be empty"));
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "spec.action: must not be empty");
    }
}
