//! A host's most recent endings, for an operator looking for a run that is no longer live:
//! tickets released, cancelled, shed, expired or superseded (with the ticket that superseded
//! them), and Submits refused (with the reason). The last [`RECENT_ENDINGS`] of them, newest
//! first, with who they were. Apart from the retention, which keeps only what an idempotent
//! retry needs, and not part of the host's image: the embedded store starts them again after
//! a restart.

use super::*;

/// Endings a host keeps for operators.
pub const RECENT_ENDINGS: usize = 200;

/// How a recent ending ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndedAs {
    /// A ticket in its terminal state.
    Ticket(TicketState),
    /// A Submit refused with this reason (a [`Refusal::code`] or `KEY_BUSY`): no ticket.
    Refused(&'static str),
}

/// One recent ending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ending {
    /// The ticket (`None` for a refused Submit).
    pub key: Option<TicketKey>,
    pub ended_as: EndedAs,
    pub run_id: Arc<str>,
    pub subject: Arc<str>,
    pub account: Option<Arc<str>>,
    pub instance: Arc<str>,
    pub keyed: Option<Arc<str>>,
    /// SUPERSEDED: the ticket that superseded it.
    pub superseded_by: Option<TicketKey>,
    /// When (the host's clock).
    pub at: Millis,
}

impl HostState {
    /// Keep `ending` as the newest, forgetting the oldest past [`RECENT_ENDINGS`].
    pub(super) fn note_ending(&mut self, ending: Ending) {
        if self.recent.len() >= RECENT_ENDINGS {
            self.recent.pop_back();
        }
        self.recent.push_front(ending);
    }

    /// Note a Submit refused with `error` (other errors are not endings), and give it back.
    pub(super) fn note_refusal(
        &mut self,
        args: &SubmitArgs,
        error: SubmitError,
        now: Millis,
    ) -> SubmitError {
        let reason = match &error {
            SubmitError::Refused(r) | SubmitError::Learning { refusal: r, .. } => r.code(),
            SubmitError::KeyBusy { .. } => "KEY_BUSY",
            _ => return error,
        };
        self.note_ending(Ending {
            key: None,
            ended_as: EndedAs::Refused(reason),
            run_id: Arc::from(args.run_id.as_str()),
            subject: Arc::from(args.subject.as_str()),
            account: args.account_id.as_deref().map(Arc::from),
            instance: Arc::from(args.instance_id.as_str()),
            keyed: args.keyed.as_ref().map(|k| Arc::from(k.key.as_str())),
            superseded_by: None,
            at: now,
        });
        error
    }

    /// The newest `limit` endings, newest first.
    pub fn recent_endings(&self, limit: usize) -> Vec<Ending> {
        self.recent.iter().take(limit).cloned().collect()
    }
}
