//! The external processor's figures per policy: requests by outcome, the time admitted
//! requests waited in the queue, and the requests that hold a slot now. Policies are the
//! configured ones and outcomes a fixed set, so the series stay bounded whatever the traffic.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use super::Histogram;

/// Per policy: outcome → count, requests held now, queue waits.
#[derive(Debug, Default)]
pub struct HttpAdmissionMetrics {
    policies: Mutex<BTreeMap<String, PolicyFigures>>,
}

#[derive(Debug, Default)]
struct PolicyFigures {
    outcomes: BTreeMap<&'static str, u64>,
    held: u64,
    waited: Histogram,
}

impl HttpAdmissionMetrics {
    fn with<T>(&self, policy: &str, f: impl FnOnce(&mut PolicyFigures) -> T) -> T {
        let mut p = self.policies.lock().expect("metrics lock");
        match p.get_mut(policy) {
            Some(figures) => f(figures),
            None => f(p.entry(policy.to_string()).or_default()),
        }
    }

    /// A request of `policy` admitted after waiting `waited`: it holds a slot from now.
    pub fn admitted(&self, policy: &str, waited: Duration) {
        self.with(policy, |f| {
            *f.outcomes.entry("admitted").or_default() += 1;
            f.held += 1;
            f.waited.observe(waited);
        });
    }

    /// A request of `policy` refused (`reason`: `QUEUE_FULL`, `MAX_WAIT`, ...).
    pub fn refused(&self, policy: &str, reason: &'static str) {
        self.with(policy, |f| *f.outcomes.entry(reason).or_default() += 1);
    }

    /// A request of `policy` released its slot.
    pub fn released(&self, policy: &str) {
        self.with(policy, |f| f.held = f.held.saturating_sub(1));
    }

    /// Requests of `policy` holding a slot now (the console's figure).
    pub fn held(&self, policy: &str) -> u64 {
        self.with(policy, |f| f.held)
    }

    /// `admission_http_requests_total`, `admission_http_requests_held` and
    /// `admission_http_queue_wait_seconds`.
    pub fn write(&self, out: &mut String) {
        let p = self.policies.lock().expect("metrics lock");
        let _ = writeln!(
            out,
            "# HELP admission_http_requests_total HTTP requests of Envoy's external processor, by policy and outcome (admitted, or the refusal's reason).\n\
             # TYPE admission_http_requests_total counter"
        );
        for (policy, f) in p.iter() {
            for (outcome, n) in &f.outcomes {
                let _ = writeln!(
                    out,
                    "admission_http_requests_total{{policy=\"{}\",outcome=\"{outcome}\"}} {n}",
                    super::escape(policy)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP admission_http_requests_held HTTP requests holding a slot now, by policy.\n\
             # TYPE admission_http_requests_held gauge"
        );
        for (policy, f) in p.iter() {
            let _ = writeln!(
                out,
                "admission_http_requests_held{{policy=\"{}\"}} {}",
                super::escape(policy),
                f.held
            );
        }
        let _ = writeln!(
            out,
            "# HELP admission_http_queue_wait_seconds How long admitted HTTP requests waited in the queue, by policy.\n\
             # TYPE admission_http_queue_wait_seconds histogram"
        );
        for (policy, f) in p.iter() {
            let labels = format!("policy=\"{}\"", super::escape(policy));
            f.waited
                .write(out, "admission_http_queue_wait_seconds", &labels);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_held_and_waits_are_counted_per_policy() {
        let m = HttpAdmissionMetrics::default();
        m.admitted("chat", Duration::from_millis(3));
        m.admitted("chat", Duration::ZERO);
        m.refused("chat", "MAX_WAIT");
        m.released("chat");
        m.released("batch");
        assert_eq!((m.held("chat"), m.held("batch")), (1, 0));
        let mut out = String::new();
        m.write(&mut out);
        assert!(
            out.contains("admission_http_requests_total{policy=\"chat\",outcome=\"admitted\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("admission_http_requests_total{policy=\"chat\",outcome=\"MAX_WAIT\"} 1\n")
        );
        assert!(out.contains("admission_http_requests_held{policy=\"chat\"} 1\n"));
        assert!(
            out.contains("admission_http_queue_wait_seconds_count{policy=\"chat\"} 2\n"),
            "{out}"
        );
    }
}
