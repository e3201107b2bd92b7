pub mod notification;
pub mod proposal;
pub mod reference;

pub use notification::NotificationApi;
pub use proposal::ProposalApi;
pub use reference::{SopApi, TargetApi};
