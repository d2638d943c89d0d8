//! The gRPC services `admission.v1.Admission` ([`admission`]), `admission.v1.Operator`
//! ([`operator`]), Envoy's `envoy.service.ratelimit.v3.RateLimitService` ([`ratelimit`]) and
//! `envoy.service.ext_proc.v3.ExternalProcessor` ([`ext_proc`]: one ticket per HTTP request),
//! and the loop that feeds a Wait stream ([`wait`]). Handlers validate at the
//! [`edge`], call one store operation, and convert the answer back ([`replies`]); every
//! failure becomes a status in one place ([`status`]). Tower
//! layers around every service of the port: [`framing`] (broken framing is bad input),
//! [`deadline`] (a deadline that runs out is DEADLINE_EXCEEDED) and [`timing`] (the RPC
//! latency histograms).

pub mod admission;
pub mod deadline;
pub mod edge;
pub mod ext_proc;
pub mod framing;
pub mod limits_input;
pub mod operator;
pub mod ratelimit;
pub mod replies;
pub mod status;
pub mod timing;
pub mod wait;

pub use admission::AdmissionService;
pub use ext_proc::ExtProcService;
pub use operator::OperatorService;
pub use ratelimit::RateLimitService;
pub use wait::POSITION_REFRESH;

use crate::api;
use crate::scheduler::TicketState;
use status::ApiError;

/// A ticket state's name in messages: the wire enum's, without its prefix.
pub(crate) fn state_name(s: TicketState) -> &'static str {
    let name = api::TicketState::from(s).as_str_name();
    name.strip_prefix("TICKET_STATE_").unwrap_or(name)
}

/// Record a field of the current RPC's span (see `server::serve`).
pub(crate) fn record(field: &'static str, value: &dyn std::fmt::Display) {
    tracing::Span::current().record(field, tracing::field::display(value));
}

/// The `limit` of a listing: 0 means the maximum.
pub(crate) fn list_limit(limit: u32) -> Result<usize, ApiError> {
    match limit {
        0 => Ok(edge::MAX_LIST as usize),
        n if n > edge::MAX_LIST => Err(ApiError::invalid(
            "limit",
            format!("must be <= {}", edge::MAX_LIST),
        )),
        n => Ok(n as usize),
    }
}
