//! coldwire: a Postgres wire-protocol proxy that gives ordinary Postgres tables a cold tier.
//!
//! Clients connect to coldwire instead of Postgres. The modules form layers; each imports
//! only from layers below it (`scripts/layers.sh` checks this). From the bottom:
//!
//! - [`wire`]: the protocol, sans-IO. [`wire::FrameScanner`] finds frame boundaries from
//!   the five-byte header so the relay forwards bytes without decoding bodies; `startup`
//!   and `messages` decode and encode the few packets coldwire reads or writes itself.
//!   Beside it [`metrics`] (names) and [`failpoint`] (pause points for crash tests).
//! - [`values`]: Postgres values as Arrow, exactly, both ways: which column types can go
//!   cold ([`values::ColdType`]), binary COPY into record batches and back.
//! - [`store`]: the cold store (object_store by URL, create-if-absent publishing).
//! - [`segment`]: the one definition of a segment file: its columns, seq and op, writer
//!   settings, the writer, footer and page reading, pruning by statistics, the page cache.
//! - [`sql`]: statements read with pg_query: classification, the read, aggregate and
//!   write rewrites, predicates, quoting.
//! - [`catalog`]: the `coldwire` schema in Postgres: migrations, capture DDL, typed access
//!   (registry, segments, jobs), policies, lock classes, the conditions coldwire retries on,
//!   a pool of catalog connections. [`config`] sits beside it.
//! - [`cold`]: cold reads, from a table's cold state (a value) and the store: the rows a
//!   statement needs (`scan`, narrowed by `lookup`) and aggregate partials (`engine`, on
//!   DataFusion).
//! - [`flush`]: flush jobs, start to finish.
//! - [`admin`]: the admin calls coldwire answers itself.
//! - [`error`]: coldwire's errors as clients see them, the one mapping to SQLSTATEs.
//! - [`session`]: one client connection: handshake, upstream, `protocol` (what becomes of
//!   every frame, sans-IO), `relay` (the I/O), `retry` (reads run again unseen), `reads`
//!   (planning reads, aggregates and writes of tiered tables).
//! - [`server`]: listeners, the accept loop, graceful shutdown; [`demo`]: the embedded
//!   default, a throwaway local Postgres (also used by the tests); [`cli`]: the operator's
//!   commands (`coldwire status`, `tier`, `flush`, …), clients of the admin calls.
//!
//! docs/architecture.md describes how the parts work together.

pub mod admin;
pub mod catalog;
pub mod cli;
pub mod cold;
pub mod config;
pub mod demo;
pub mod error;
pub mod failpoint;
pub mod flush;
pub mod metrics;
pub mod segment;
pub mod server;
pub mod session;
pub mod sql;
pub mod store;
pub mod values;
pub mod wire;
