//! The flush (DESIGN §5): how many rows to take, the durable job queue that runs it, and
//! the run itself (copy out, write segments, publish, prune the heap).

pub mod executor;
mod finalize;
pub mod manifest;
pub mod probe;
pub mod run;
pub mod select;
mod table;
mod write;
