//! The evaluation service: `pdl-swe serve` ([`server`]) and its client
//! ([`client`]).
//!
//! A benchmark owner keeps hidden tests and gold patches private on the
//! server; submitters send predictions and get back rewards, verdicts and the
//! public tests' outcomes, never what they are graded against. The service
//! grades through the same pipeline as `pdl-swe grade`
//! ([`pdl_grader::pipeline`]), from a durable queue in SQLite or PostgreSQL
//! ([`db`]), with workers that claim jobs under a lease ([`worker`]).
//!
//! The HTTP API is described in `docs/SERVICE.md` and `docs/openapi.yaml`;
//! [`api`] holds the types both sides share. The library never prints: the
//! server reports what happens through a [`server::Log`] callback, the client
//! through return values and a progress callback.

pub mod api;
pub mod client;
pub mod db;
pub mod keys;
pub mod server;
pub mod store;
pub mod view;
pub mod worker;

pub use api::ApiError;
pub use db::{Db, DbError, Quotas, Role};
