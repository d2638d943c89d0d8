//! SetLimits' `HostLimits` into the domain's limits, checked by the configuration file's rules
//! (one checker for both), with each problem named by its request field.

use super::status::ApiError;
use crate::api;
use crate::scheduler::{Limits, MemoryLimits};

/// SetLimits' limits, checked by the configuration file's rules (the memory ladder kept from
/// `memory`): every problem is named by its field under `limits`.
pub fn operator_limits(
    limits: Option<&api::HostLimits>,
    memory: MemoryLimits,
) -> Result<Limits, ApiError> {
    use serde_norway::{Mapping, Value};
    let l = limits.ok_or_else(|| ApiError::invalid("limits", "required"))?;
    let queue = l.queue.unwrap_or_default();
    let mut block = Mapping::new();
    block.insert("total".into(), l.total.into());
    block.insert("per_subject".into(), l.per_subject.into());
    if let Some(n) = l.per_account {
        block.insert("per_account".into(), n.into());
    }
    // The file writes a weight inside the subject's entry: {cap, weight}.
    let mut subjects = Mapping::new();
    for name in l.subjects.keys().chain(l.weights.keys()) {
        let entry = match (l.subjects.get(name), l.weights.get(name)) {
            (Some(c), None) => Value::from(*c),
            (cap, weight) => {
                let mut e = Mapping::new();
                if let Some(c) = cap {
                    e.insert("cap".into(), (*c).into());
                }
                if let Some(w) = weight {
                    e.insert("weight".into(), (*w).into());
                }
                Value::Mapping(e)
            }
        };
        subjects.insert(Value::from(name.as_str()), entry);
    }
    block.insert("subjects".into(), Value::Mapping(subjects));
    // The file writes an adaptive account as {adaptive: {...}} among the accounts.
    let adaptive = |a: &api::AdaptiveLimits| {
        let mut m = Mapping::new();
        if a.min > 0 {
            m.insert("min".into(), a.min.into());
        }
        m.insert("max".into(), a.max.into());
        if a.decrease != 0.0 {
            m.insert("decrease".into(), a.decrease.into());
        }
        if a.increase > 0 {
            m.insert("increase".into(), a.increase.into());
        }
        if let Some(ms) = a.cooldown_ms {
            m.insert("cooldown".into(), format!("{ms}ms").into());
        }
        Value::Mapping(m)
    };
    let mut accounts: Mapping = l
        .accounts
        .iter()
        .map(|(k, v)| (Value::from(k.as_str()), Value::from(*v)))
        .collect();
    for (name, a) in &l.adaptive_accounts {
        let mut e = Mapping::new();
        e.insert("adaptive".into(), adaptive(a));
        if let Some(cap) = accounts.remove(name.as_str()) {
            e.insert("cap".into(), cap);
        }
        accounts.insert(Value::from(name.as_str()), Value::Mapping(e));
    }
    block.insert("accounts".into(), Value::Mapping(accounts));
    if let Some(a) = &l.adaptive {
        block.insert("adaptive".into(), adaptive(a));
    }
    let mut q = Mapping::new();
    q.insert("total".into(), queue.total.into());
    q.insert("per_subject".into(), queue.per_subject.into());
    q.insert("hard_total".into(), queue.hard_total.into());
    block.insert("queue".into(), Value::Mapping(q));
    block.insert("overflow_policy".into(), l.overflow_policy.as_str().into());
    block.insert("lease_ttl".into(), format!("{}ms", l.lease_ttl_ms).into());
    block.insert("retention".into(), format!("{}ms", l.retention_ms).into());
    block.insert("max_retained".into(), l.max_retained.into());
    block.insert(
        "priority_aging".into(),
        format!("{}ms", l.priority_aging_ms).into(),
    );
    if !l.mode.is_empty() {
        block.insert("mode".into(), l.mode.as_str().into());
    }
    crate::config::operator_limits(&Value::Mapping(block), memory).map_err(|errors| {
        // The file's keys, named as the message's fields.
        ApiError::InvalidFields(
            errors
                .0
                .iter()
                .map(|e| {
                    let e = e
                        .replacen("limits.lease_ttl:", "limits.lease_ttl_ms:", 1)
                        .replacen("limits.retention:", "limits.retention_ms:", 1)
                        .replacen("limits.priority_aging:", "limits.priority_aging_ms:", 1);
                    let e = weight_field(&e).unwrap_or(e);
                    let e = adaptive_field(&e).unwrap_or(e);
                    match e.split_once(": ") {
                        Some((field, rule)) => (field.to_string(), rule.to_string()),
                        None => ("limits".to_string(), e),
                    }
                })
                .collect(),
        )
    })
}

/// A problem of a subject's weight as the file names it (`limits.subjects.<name>.weight`),
/// named as the message's field (`limits.weights.<name>`); `None` for any other problem.
fn weight_field(e: &str) -> Option<String> {
    let rest = e.strip_prefix("limits.subjects.")?;
    let (field, rule) = rest.split_once(": ")?;
    let name = field.strip_suffix(".weight")?;
    Some(format!("limits.weights.{name}: {rule}"))
}

/// A problem of an account's adaptive settings as the file names it
/// (`limits.accounts.<name>.adaptive.max`, `limits.accounts.<name>`), named as the message's
/// field (`limits.adaptive_accounts.<name>.max`); a default's cooldown as `cooldown_ms`.
fn adaptive_field(e: &str) -> Option<String> {
    let (field, rule) = e.split_once(": ")?;
    let renamed = match field
        .strip_prefix("limits.accounts.")
        .and_then(|rest| rest.split_once(".adaptive"))
    {
        Some((name, key)) => format!("limits.adaptive_accounts.{name}{key}"),
        None if field.starts_with("limits.adaptive") => field.to_string(),
        None => return None,
    };
    Some(format!(
        "{}: {rule}",
        renamed.replace(".cooldown", ".cooldown_ms")
    ))
}
