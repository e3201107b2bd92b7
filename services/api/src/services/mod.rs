pub mod proposal;

pub use proposal::ProposalApi;
