pub mod audit;
pub mod notification;
pub mod proposal;
pub mod reference;

pub use audit::AuditApi;
pub use notification::NotificationApi;
pub use proposal::ProposalApi;
pub use reference::{SopApi, TargetApi};
