//! coldwire: a Postgres wire-protocol proxy that gives ordinary Postgres tables a cold tier.
//!
//! Clients connect to coldwire instead of Postgres. The layers, from the socket inwards:
//!
//! - [`wire`]: the protocol, sans-IO. [`wire::FrameScanner`] finds frame boundaries from
//!   the five-byte header so the relay forwards bytes without decoding bodies; `startup`
//!   and `messages` decode and encode the few packets coldwire reads or writes itself;
//!   `tls` and `cancel` hold client TLS and the cancel-key map.
//! - [`session`]: one client connection: the handshake (SSL/GSSENC negotiation, cancel,
//!   startup), the upstream connection, the two-way relay, and the [`session::SessionState`]
//!   (transaction phase, server parameters, prepared statement names) learnt on the way.
//! - [`server`]: listeners, the accept loop, graceful shutdown.
//! - [`cold`]: cold values, sans-IO: which column types can go cold ([`cold::ColdType`]),
//!   a streaming decoder of binary COPY output into Arrow record batches
//!   ([`cold::CopyDecoder`]) and the way back to binary COPY and binary parameters, exact
//!   to the byte.
//! - [`admin`]: the admin calls (`coldwire.tier_table(…)`, …) recognized in SQL text with
//!   pg_query, and their policy validation.
//! - [`catalog`]: the `coldwire` schema in Postgres (tiered tables, segments, jobs, the
//!   `status` view, admin stubs) and its versioned migrations, run at start through the
//!   service connection.
//! - [`config`], [`metrics`], [`error`] (the single mapping from coldwire errors to SQLSTATEs).
//! - [`demo`]: the embedded default, a throwaway local Postgres (also used by the tests).
//!
//! [`cold`] converts Postgres values to Arrow and back exactly; [`flush`] holds the flush's
//! selection, job queue and cold store. The read and write rewrites (`sql/`) build on
//! these; see docs/architecture.md for what exists today.

pub mod admin;
pub mod catalog;
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
