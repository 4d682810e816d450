//! Merged reads inside a session (DESIGN §6): the catalog cache shared by a proxy's
//! sessions, and the planning of statements that read tiered tables.

mod catalog;
mod path;

pub use path::{
    after_plan, own_frames, OwnCall, Part, Plan, PlanError, PreparedRead, PreparedWrite, ReadPath,
    OWN_COMPLETIONS,
};
