//! Merged reads inside a session (DESIGN §6): the catalog cache shared by a proxy's
//! sessions, and the planning of statements that read tiered tables.

mod aggregate;
mod catalog;
mod own;
mod path;
mod query;
mod writes;

pub use own::{
    own_frames, own_frames_as, own_statement_name, read_lock_frames, read_lock_rows,
    refusal_unless_hot_only_sql, rollback_frames, table_lock_frames, tiered_tables_frames,
    BroughtBack, OwnCall, OwnForm, OWN_COMPLETIONS, RELEASE_SQL, SAVEPOINT_SQL,
};
pub use path::{after_plan, KnownHot, PlanError, PreparedRead, ReadPath, TxnView};
pub use query::{Part, Plan};
pub use writes::PreparedWrite;
