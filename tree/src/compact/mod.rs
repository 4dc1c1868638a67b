//! The stream every table write passes (flush, compaction, checkpoint, recovery): the newest
//! versions a snapshot can still see ([`newest::NewestVersions`]), merge operands folded
//! ([`merge_stage::MergeStage`]), then the user's compaction filter and expiry
//! ([`filter_stage::FilterStage`]). What to compact next is [`picker`]'s choice.

pub mod filter_stage;
pub mod merge_stage;
pub mod newest;
pub mod picker;
