//! # admission-authority
//!
//! One gRPC service that every replica of an AI-agent gateway calls to decide, installation-wide,
//! who may run now.
//!
//! # Layout
//!
//! * [`scheduler`]: the pure scheduling core (caps, queue, round robin, leases), with `now`
//!   passed in. No I/O.
//! * [`auth`]: auth buckets: the pure rules and the bounded local table, with `now` passed in.
//! * [`ledger`]: resource reservations: per-run budgets, account allowances, Authorize and
//!   Settle, with `now` passed in. No I/O.
//! * [`ratelimit`]: Envoy's rate limit service: envoyproxy/ratelimit's rules and windows, the
//!   bounded counter table, with `now` passed in. No I/O.
//! * [`history`]: a host's last hour in buckets: samples of its gauges and counters, and
//!   what changed between them. No I/O.
//! * [`http_admission`]: the external processor's policies and what an HTTP request asks of
//!   the scheduler under one, read from its headers. No I/O.
//! * [`store`]: the [`store::Store`] trait, whose unit is one atomic operation, and its
//!   implementations ([`store::memory`]).
//! * [`clock`]: the injected clock; [`pause`]: the authority's own pauses (a stopped or
//!   throttled process), so that leases count from the resume.
//! * [`gates`]: the process-wide switches (draining, the authority's own memory).
//! * [`config`]: YAML + flags → a validated [`config::Config`]; every problem reported with its
//!   path in one pass.
//! * [`api`]: the generated protobuf types and services.
//! * [`service`]: the gRPC services; the one place where proto and domain types meet
//!   ([`service::edge`]) and where refusals become statuses.
//! * [`metrics`]: Prometheus metrics.
//! * [`admin`]: the admin endpoint (`/metrics`, `/healthz`, `/readyz`, and the operator console's
//!   gRPC-Web calls); [`console`]: the console's page and assets, built from `console/`.
//! * [`net`]: the network edge: a bound on open connections.
//! * [`security`]: credentials, the authenticated [`security::Caller`] and what it may do.
//! * [`telemetry`]: OpenTelemetry export over OTLP, when the `OTEL_*` variables ask for it.
//! * [`server`]: the composition root: builds the store and services, serves until shutdown.
//!   `main` and the tests both start the server through it.
#![forbid(unsafe_code)]

pub mod admin;
pub mod api;
pub mod auth;
pub mod clock;
pub mod config;
pub mod console;
pub mod gates;
pub mod history;
pub mod http_admission;
pub mod ledger;
pub mod metrics;
pub mod net;
pub mod pause;
pub mod ratelimit;
pub mod scheduler;
pub mod security;
pub mod server;
pub mod service;
pub mod store;
pub mod telemetry;
