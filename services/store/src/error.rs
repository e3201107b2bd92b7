use countersign_domain::{ErrorKind, ServiceError};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    Unsupported(String),
    /// A stored row that does not decode: never guessed at, always an error.
    #[error("stored data is malformed: {0}")]
    Corrupt(String),
    /// The database role could bypass row-level security (PostgreSQL): the
    /// store will not run on it.
    #[error("refusing to run as database role {0}")]
    UnsafeRole(String),
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// From the embedded (SQLite) store.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("migration failed: {0}")]
    SqliteMigrate(#[from] crate::sqlite::MigrateError),
}

impl ServiceError for StoreError {
    fn kind(&self) -> ErrorKind {
        match self {
            StoreError::NotFound(_) => ErrorKind::NotFound,
            StoreError::AlreadyExists(_) => ErrorKind::AlreadyExists,
            StoreError::FailedPrecondition(_) => ErrorKind::FailedPrecondition,
            StoreError::InvalidArgument(_) => ErrorKind::InvalidArgument,
            StoreError::PermissionDenied(_) => ErrorKind::PermissionDenied,
            StoreError::Unavailable(_) => ErrorKind::Unavailable,
            StoreError::Database(
                sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_),
            ) => ErrorKind::Unavailable,
            StoreError::Unsupported(_)
            | StoreError::UnsafeRole(_)
            | StoreError::Corrupt(_)
            | StoreError::Database(_)
            | StoreError::Sqlite(_)
            | StoreError::Migrate(_)
            | StoreError::SqliteMigrate(_) => ErrorKind::Internal,
        }
    }
}
