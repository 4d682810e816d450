//! Cold reads: the rows of a tiered table's cold tier that a statement needs, newest
//! version first, from the segments the catalog lists (DESIGN §6.3). It takes the catalog's
//! facts as values and reads segments through [`crate::segment`] and [`crate::store`].

pub mod engine;
mod lookup;
pub mod scan;
