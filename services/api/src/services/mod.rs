pub mod proposal;
pub mod reference;

pub use proposal::ProposalApi;
pub use reference::{SopApi, TargetApi};
