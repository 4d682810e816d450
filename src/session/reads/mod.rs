//! Merged reads inside a session (DESIGN §6): the catalog cache shared by a proxy's
//! sessions, and the planning of statements that read tiered tables.

mod catalog;
mod own;
mod path;
mod writes;

pub use own::{own_frames, read_lock_frames, read_lock_rows, OwnCall, OWN_COMPLETIONS};
pub use path::{after_plan, Part, Plan, PlanError, PreparedRead, ReadPath};
pub use writes::PreparedWrite;
