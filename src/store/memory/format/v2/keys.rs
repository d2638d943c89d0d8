//! Format 4's keys: what a host's snapshot piece (`5 HostKeyed`) holds of its tickets' keys
//! beside format 2's host (see `pieces`), and the conversion to and from the core's image;
//! format 5's places of ended keyed tickets (`6 HostPlaced`).

use serde::{Deserialize, Serialize};

use super::{Text, key_policy_code, key_policy_of, text};
use crate::scheduler::{EndedImage, HostImage, TicketImage};

/// What a host's tickets hold of keys (format 4): the last key sequence number handed out,
/// the superseded and key-refused counts, its keyed live tickets, and the ended tickets that
/// were superseded with the ticket that superseded them.
#[derive(Debug, Serialize, Deserialize)]
pub struct KeysV4<'a> {
    pub next_key_seq: u64,
    pub superseded: u64,
    pub key_refused: u64,
    #[serde(borrow)]
    pub tickets: Vec<KeyedTicketV4<'a>>,
    pub ended: Vec<(u128, u128)>,
}

/// A live ticket's key: (ticket key, key, policy as in a keyed Submit's record, key_seq,
/// ready_at, burst_since?, superseded_by?).
pub type KeyedTicketV4<'a> = (u128, Text<'a>, u8, u64, u64, Option<u64>, Option<u128>);

/// The keys of a host's image, as format 4 writes them beside its tickets.
pub(super) fn keys_of(h: &HostImage) -> KeysV4<'_> {
    KeysV4 {
        next_key_seq: h.next_key_seq,
        superseded: h.counters.superseded,
        key_refused: h.counters.key_refused,
        tickets: h
            .tickets
            .iter()
            .filter_map(|t| {
                let (key, policy) = t.keyed.as_ref()?;
                Some((
                    t.key,
                    text(key),
                    key_policy_code(*policy),
                    t.key_seq,
                    t.ready_at,
                    t.burst_since,
                    t.superseded_by,
                ))
            })
            .collect(),
        ended: h
            .ended
            .iter()
            .filter_map(|e| Some((e.key, e.superseded_by?)))
            .collect(),
    }
}

/// Put a host's keys back into its image (read without them).
fn with_keys(h: &mut HostImage, keys: KeysV4<'_>) -> Result<(), String> {
    h.next_key_seq = keys.next_key_seq;
    h.counters.superseded = keys.superseded;
    h.counters.key_refused = keys.key_refused;
    let mut tickets: std::collections::HashMap<u128, &mut TicketImage> =
        h.tickets.iter_mut().map(|t| (t.key, t)).collect();
    for (ticket, key, policy, key_seq, ready_at, burst_since, superseded_by) in keys.tickets {
        let t = tickets
            .get_mut(&ticket)
            .ok_or_else(|| format!("the key of ticket {ticket:x}, which is not live"))?;
        t.keyed = Some((key.into_owned(), key_policy_of(policy)?));
        t.key_seq = key_seq;
        t.ready_at = ready_at;
        t.burst_since = burst_since;
        t.superseded_by = superseded_by;
    }
    let mut ended: std::collections::HashMap<u128, &mut EndedImage> =
        h.ended.iter_mut().map(|e| (e.key, e)).collect();
    for (ticket, by) in keys.ended {
        ended
            .get_mut(&ticket)
            .ok_or_else(|| format!("superseded ticket {ticket:x}, which is not remembered"))?
            .superseded_by = Some(by);
    }
    Ok(())
}

/// The places of a host's remembered ended keyed tickets among their keys' (format 5): (ticket
/// key, key_seq). A Submit of such a ticket's run again takes its place.
pub type PlacesV5 = Vec<(u128, u64)>;

/// The places of a host's image's ended keyed tickets, as format 5 writes them.
pub(super) fn places_of(h: &HostImage) -> PlacesV5 {
    h.ended
        .iter()
        .filter(|e| e.key_seq > 0)
        .map(|e| (e.key, e.key_seq))
        .collect()
}

/// Put a host's ended tickets' places back into its image (read without them).
fn with_places(h: &mut HostImage, places: PlacesV5) -> Result<(), String> {
    let mut ended: std::collections::HashMap<u128, &mut EndedImage> =
        h.ended.iter_mut().map(|e| (e.key, e)).collect();
    for (ticket, place) in places {
        ended
            .get_mut(&ticket)
            .ok_or_else(|| format!("the place of ticket {ticket:x}, which is not remembered"))?
            .key_seq = place;
    }
    Ok(())
}

/// A host's image read from a piece, with its keys (format 4 on) and its ended tickets'
/// places (format 5 on) put back when the piece has them.
pub(super) fn with_keys_and_places(
    mut h: HostImage,
    keys: Option<KeysV4<'_>>,
    places: Option<PlacesV5>,
) -> Result<HostImage, String> {
    if let Some(keys) = keys {
        with_keys(&mut h, keys)?;
    }
    if let Some(places) = places {
        with_places(&mut h, places)?;
    }
    Ok(h)
}
