//! SQL that names tiered tables (DESIGN §6): the read rewrite, the conjuncts the cold
//! planner prunes by, and Bind values as constants. Classification in sessions, the guard
//! and the write path build on it (see docs/architecture.md for what exists).

pub mod aggregate;
pub mod classify;
pub mod columns;
pub mod copy_to;
pub mod ddl;
pub mod params;
pub mod predicates;
pub mod quote;
pub mod rewrite;
pub mod tree;
pub mod writes;
