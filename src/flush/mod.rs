//! The flush (DESIGN §5): how many rows to take, and the durable job queue that runs it.

pub mod backend;
pub mod executor;
pub mod failpoint;
pub mod jobs;
pub mod manifest;
pub mod probe;
pub mod run;
pub mod segment;
pub mod select;
pub mod store;
