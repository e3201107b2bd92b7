//! The store by role: one trait per kind of caller, each in the file of its
//! name, implemented in the area file of the same name in each backend
//! (`sqlite/`, `postgres/`). [`Store`] is their sum, for a caller that needs
//! them all (the composition root, the admin commands); every other caller
//! takes the narrow trait it uses (an `Arc<dyn Store>` upcasts to any of them).

mod audit;
mod console_sessions;
mod directory;
mod escalations;
mod events;
mod lifecycle;
mod model_profiles;
mod proposals;
mod reference;
mod reviews;
mod routes;
mod suppression;

pub use audit::AuditLog;
pub use console_sessions::ConsoleSessions;
pub use directory::{ApiKeys, Directory, Tenants};
pub use escalations::Escalations;
pub use events::{Changes, EventLog};
pub use lifecycle::Lifecycle;
pub use model_profiles::{ModelCalls, ModelProfiles};
pub use proposals::Proposals;
pub use reference::Reference;
pub use reviews::Reviews;
pub use routes::Routes;
pub use suppression::Suppressions;

/// Every role of the store: what a backend implements, and what a caller
/// that needs all of them holds ([`crate::DynStore`]).
pub trait Store:
    Lifecycle
    + Directory
    + Proposals
    + Reference
    + Reviews
    + Routes
    + ModelProfiles
    + ModelCalls
    + Escalations
    + EventLog
    + Suppressions
    + AuditLog
    + ConsoleSessions
{
}

impl<T> Store for T where
    T: Lifecycle
        + Directory
        + Proposals
        + Reference
        + Reviews
        + Routes
        + ModelProfiles
        + ModelCalls
        + Escalations
        + EventLog
        + Suppressions
        + AuditLog
        + ConsoleSessions
{
}
