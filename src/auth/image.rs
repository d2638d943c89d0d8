//! The auth buckets as plain data ([`AuthImage`]), for a store to write down and bring back:
//! every key with its window and lockout, and every endpoint's expiry queue as it stands
//! (stale items included, since the soonest one is what a full table's refusal tells the
//! caller to wait for).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use super::{AuthTable, Endpoint, Entry};
use crate::scheduler::Millis;

/// The bucket table, as [`AuthTable::image`] gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthImage {
    pub max_keys: usize,
    /// Endpoints, sorted by name.
    pub endpoints: Vec<EndpointImage>,
}

/// One endpoint's keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointImage {
    pub endpoint: String,
    /// (identity, attempts in the window, window end or 0, lockout end or 0), by identity.
    pub keys: Vec<(String, u32, Millis, Millis)>,
    /// The expiry queue's items: (when, identity), soonest first.
    pub expiries: Vec<(Millis, String)>,
}

impl AuthTable {
    /// The table as plain data; see the module documentation.
    pub fn image(&self) -> AuthImage {
        let mut endpoints: Vec<EndpointImage> = self
            .endpoints
            .iter()
            .map(|(name, ep)| {
                let mut keys: Vec<_> = ep
                    .keys
                    .iter()
                    .map(|(id, e)| (id.to_string(), e.count, e.window_end, e.locked_until))
                    .collect();
                keys.sort();
                let mut expiries: Vec<_> = ep
                    .expiries
                    .iter()
                    .map(|Reverse((at, id))| (*at, id.to_string()))
                    .collect();
                expiries.sort();
                EndpointImage {
                    endpoint: name.to_string(),
                    keys,
                    expiries,
                }
            })
            .collect();
        endpoints.sort_by(|a, b| a.endpoint.cmp(&b.endpoint));
        AuthImage {
            max_keys: self.max_keys,
            endpoints,
        }
    }

    /// The table an image describes.
    ///
    /// Fails when an endpoint or a key appears twice.
    pub fn from_image(image: AuthImage) -> Result<AuthTable, String> {
        let mut table = AuthTable::new(image.max_keys);
        for ep in image.endpoints {
            let mut keys = HashMap::with_capacity(ep.keys.len());
            for (identity, count, window_end, locked_until) in ep.keys {
                let entry = Entry {
                    count,
                    window_end,
                    locked_until,
                };
                if keys.insert(identity.as_str().into(), entry).is_some() {
                    return Err(format!("{}: key {identity:?} appears twice", ep.endpoint));
                }
            }
            table.len += keys.len();
            let expiries: BinaryHeap<_> = ep
                .expiries
                .into_iter()
                .map(|(at, id)| Reverse((at, id.into_boxed_str())))
                .collect();
            let name: Arc<str> = Arc::from(ep.endpoint.as_str());
            if table
                .endpoints
                .insert(name, Endpoint { keys, expiries })
                .is_some()
            {
                return Err(format!("endpoint {:?} appears twice", ep.endpoint));
            }
        }
        Ok(table)
    }
}
