//! A host's ledger as plain data ([`LedgerImage`]), for a store to write down and bring back:
//! the runs with their steps, the allowance windows and the counters. The open-step sets are
//! rebuilt from the steps; each reserved step keeps the deadline it was given (the TTL in force
//! when it was authorized), so a restored ledger marks it uncertain at the same moment.

use std::collections::{BTreeSet, HashMap};

use super::{AccountWindow, Authorization, Ledger, LedgerStats, Micros, Run, Step, StepState};
use crate::scheduler::Millis;

/// One host's ledger, as [`Ledger::image`] gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerImage {
    /// Runs, sorted by run id.
    pub runs: Vec<RunImage>,
    /// Allowance windows by account: (account, start, end, used tokens, used cost).
    pub windows: Vec<(String, Millis, Millis, u64, Micros)>,
    pub stats: LedgerStats,
    /// When idle runs are next looked for.
    pub next_forget: Millis,
}

/// One run and its steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunImage {
    pub run_id: String,
    pub subject: String,
    pub account: Option<String>,
    pub used_tokens: u64,
    pub used_cost: Micros,
    /// Steps settled with partial or unknown coverage.
    pub partial_steps: u32,
    pub last_touched: Millis,
    /// Its steps, by step number.
    pub steps: Vec<StepImage>,
}

/// One decided step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepImage {
    pub step: u32,
    pub answer: Authorization,
    pub state: StepState,
    pub model: String,
    pub reserved_tokens: u64,
    pub reserved_cost: Micros,
    /// Start of the allowance window it was charged to.
    pub window: Option<Millis>,
    pub decided_at: Millis,
    /// For a reserved step: when it becomes uncertain.
    pub deadline: Option<Millis>,
}

impl Ledger {
    /// The ledger as plain data; see the module documentation.
    pub fn image(&self) -> LedgerImage {
        let deadlines: HashMap<(&str, u32), Millis> = self
            .deadlines
            .iter()
            .map(|(at, run, step)| ((&**run, *step), *at))
            .collect();
        let mut runs: Vec<RunImage> = self
            .runs
            .iter()
            .map(|(run_id, r)| {
                let mut steps: Vec<StepImage> = r
                    .steps
                    .iter()
                    .map(|(n, s)| StepImage {
                        step: *n,
                        answer: s.answer,
                        state: s.state,
                        model: s.model.to_string(),
                        reserved_tokens: s.reserved_tokens,
                        reserved_cost: s.reserved_cost,
                        window: s.window,
                        decided_at: s.decided_at,
                        deadline: (s.state == StepState::Reserved)
                            .then(|| deadlines.get(&(&**run_id, *n)).copied())
                            .flatten(),
                    })
                    .collect();
                steps.sort_by_key(|s| s.step);
                RunImage {
                    run_id: run_id.to_string(),
                    subject: r.subject.to_string(),
                    account: r.account.as_deref().map(str::to_string),
                    used_tokens: r.used_tokens,
                    used_cost: r.used_cost,
                    partial_steps: r.partial_steps,
                    last_touched: r.last_touched,
                    steps,
                }
            })
            .collect();
        runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        let mut windows: Vec<_> = self
            .windows
            .iter()
            .map(|(a, w)| (a.to_string(), w.start, w.end, w.used_tokens, w.used_cost))
            .collect();
        windows.sort();
        LedgerImage {
            runs,
            windows,
            stats: self.stats,
            next_forget: self.next_forget,
        }
    }

    /// The ledger an image describes.
    ///
    /// Fails when a run or a step appears twice.
    pub fn from_image(image: LedgerImage) -> Result<Ledger, String> {
        let mut ledger = Ledger {
            stats: image.stats,
            next_forget: image.next_forget,
            ..Ledger::default()
        };
        for r in image.runs {
            let mut run = Run {
                subject: r.subject.into(),
                account: r.account.map(Into::into),
                used_tokens: r.used_tokens,
                used_cost: r.used_cost,
                partial_steps: r.partial_steps,
                open_steps: BTreeSet::new(),
                steps: HashMap::with_capacity(r.steps.len()),
                last_touched: r.last_touched,
            };
            for s in r.steps {
                if s.state.is_open() {
                    run.open_steps.insert(s.step);
                }
                if let Some(at) = s.deadline {
                    ledger
                        .deadlines
                        .insert((at, r.run_id.as_str().into(), s.step));
                }
                let step = Step {
                    answer: s.answer,
                    state: s.state,
                    model: s.model.into(),
                    reserved_tokens: s.reserved_tokens,
                    reserved_cost: s.reserved_cost,
                    window: s.window,
                    decided_at: s.decided_at,
                };
                if run.steps.insert(s.step, step).is_some() {
                    return Err(format!("run {:?}: step {} appears twice", r.run_id, s.step));
                }
            }
            if ledger.runs.insert(r.run_id.as_str().into(), run).is_some() {
                return Err(format!("run {:?} appears twice", r.run_id));
            }
        }
        for (account, start, end, used_tokens, used_cost) in image.windows {
            let window = AccountWindow {
                start,
                end,
                used_tokens,
                used_cost,
            };
            if ledger
                .windows
                .insert(account.as_str().into(), window)
                .is_some()
            {
                return Err(format!("allowance window of {account:?} appears twice"));
            }
        }
        Ok(ledger)
    }
}
