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

/// Turns any service error into the status a caller sees. An internal
/// error's cause is never sent (the caller reads "internal error"); it is
/// logged here, at error level, on the span of the call that met it.
pub fn to_status(err: &(impl ServiceError + ?Sized)) -> Status {
    let kind = err.kind();
    if kind == ErrorKind::Internal {
        tracing::error!(error = %err, "internal error");
    }
    Status::new(code(kind), err.public_message())
}

/// `.or_status()`: a service's result as its caller sees it, the error
/// through [`to_status`].
pub trait OrStatus<T> {
    fn or_status(self) -> Result<T, Status>;
}

impl<T, E: ServiceError> OrStatus<T> for Result<T, E> {
    fn or_status(self) -> Result<T, Status> {
        self.map_err(|err| to_status(&err))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use countersign_domain::FieldError;

    use super::*;

    /// An internal error with a cause a caller must not see.
    #[derive(Debug, thiserror::Error)]
    #[error("database error: disk I/O error on /var/lib/countersign/countersign.db")]
    struct Broken;

    impl ServiceError for Broken {
        fn kind(&self) -> ErrorKind {
            ErrorKind::Internal
        }
    }

    /// Every line logged while `f` runs.
    fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Lines(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn an_internal_error_is_logged_once_with_its_cause_and_never_sent() {
        let mut status = None;
        let log = logged(|| status = Some(to_status(&Broken)));
        let status = status.unwrap();
        assert_eq!(status.code(), Code::Internal);
        assert_eq!(status.message(), "internal error");
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(
            log.contains("ERROR") && log.contains("disk I/O error on /var/lib"),
            "{log}"
        );
        let log = logged(|| {
            to_status(&FieldError::new("spec.action", "must not be empty"));
        });
        assert!(log.is_empty(), "a caller's mistake is not an error: {log}");
    }

    #[test]
    fn a_field_error_is_invalid_argument_naming_the_field() {
        let status = Err::<(), _>(FieldError::new("spec.action", "must not be empty"))
            .or_status()
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "spec.action: must not be empty");
        assert_eq!(Ok::<_, FieldError>(7).or_status().unwrap(), 7);
    }
}
