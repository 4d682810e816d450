//! SQL that names tiered tables (DESIGN §6): the read rewrite. Classification in sessions,
//! the guard and the write path build on it (see docs/architecture.md for what exists).

pub mod predicates;
pub mod rewrite;
