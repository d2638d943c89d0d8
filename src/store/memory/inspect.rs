//! What a data dir holds, looked at without changing it (`admission-authority data-dir
//! inspect`): its format, files and sizes, and per host the tickets, reservations and limits;
//! the auth buckets and the rate limit counters. The dir is read as [`MemoryStore::open`] reads it, into memory only:
//! no lock taken, nothing written, a torn last record left alone, nothing replayed past what
//! the files hold (no restart, no expiry), so it is safe beside the server that serves from it.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use super::MemoryStore;
use super::persist::Loaded;
use crate::clock::{Clock, SystemClock};
use crate::store::Policy;
use crate::store::journal::{DataDir, FORMAT, OpenError};

/// What `data-dir inspect` reports.
#[derive(Debug, Serialize)]
pub struct Inspection {
    pub dir: String,
    /// The format its FORMAT file names; this build writes [`FORMAT`].
    pub format: u32,
    pub this_build_writes: u32,
    /// A running process holds the dir's lock: what is shown is the dir as it stood when read.
    pub in_use: bool,
    pub files: Vec<FileInfo>,
    pub total_bytes: u64,
    /// The store time (ms) of the latest record or snapshot.
    pub store_time_ms: u64,
    /// Log records after the snapshot.
    pub records: u64,
    pub hosts: Vec<HostInfo>,
    pub auth: AuthInfo,
    /// Envoy's rate limit counters held, by domain (those of ended windows included until the
    /// next prune).
    pub rate_limit_counters: Vec<(String, usize)>,
}

#[derive(Debug, Serialize)]
pub struct FileInfo {
    pub name: String,
    pub bytes: u64,
    /// `None` for a file too short to say.
    pub format: Option<u32>,
}

#[derive(Debug, Serialize)]
pub struct HostInfo {
    pub host_id: String,
    pub admitted: u32,
    pub queued: u32,
    pub parked: u32,
    /// Ended tickets remembered for retries.
    pub retained: usize,
    /// Reservations held: reserved or uncertain.
    pub reservations_open: u64,
    pub reservations_uncertain: u64,
    pub steps_settled: u64,
    /// `file` or `operator`.
    pub limits_source: &'static str,
    pub limits_revision: u64,
    pub total_cap: u32,
}

#[derive(Debug, Serialize)]
pub struct AuthInfo {
    /// Keys (endpoint, identity) with a window or lockout, by endpoint.
    pub keys: Vec<(String, usize)>,
    /// Of those, locked out as of the dir's last change.
    pub locked_out: usize,
}

impl MemoryStore {
    /// Look at the data dir at `path`; see the module documentation.
    ///
    /// Fails when it is not a data dir, is of a newer format, or a file cannot be read or is
    /// damaged before its end (each error names the file).
    pub fn inspect(path: &Path) -> Result<Inspection, OpenError> {
        let dir = DataDir::open_read_only(path)?;
        let in_use = dir.held();
        let files: Vec<FileInfo> = dir
            .files()
            .into_iter()
            .map(|(name, bytes, format)| FileInfo {
                name,
                bytes,
                format,
            })
            .collect();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let Loaded {
            store,
            seen_now,
            records,
            ..
        } = MemoryStore::load(&dir, path, Policy::default(), clock)?;
        // Counted as of the dir's last change (a lockout "now" would depend on when one looks).
        let now = seen_now;
        let mut hosts: Vec<HostInfo> = store
            .all_hosts()
            .into_iter()
            .map(|(host_id, host)| {
                let inner = host.inner.lock().expect("host lock");
                let (state, limits) = (&inner.core.state, &inner.core.limits);
                let s = state.stats(&limits.limits, now);
                let l = host.ledger.lock().expect("ledger lock").ledger.stats();
                HostInfo {
                    admitted: s.in_flight,
                    queued: s.queued,
                    parked: s.parked,
                    retained: state.retained(),
                    reservations_open: l.open,
                    reservations_uncertain: l.uncertain,
                    steps_settled: l.settled,
                    limits_source: match limits.source {
                        crate::scheduler::LimitsSource::File => "file",
                        crate::scheduler::LimitsSource::Operator => "operator",
                    },
                    limits_revision: limits.revision,
                    total_cap: limits.limits.total,
                    host_id,
                }
            })
            .collect();
        hosts.sort_by(|a, b| a.host_id.cmp(&b.host_id));
        let image = store.auth.lock().expect("auth lock").table.image();
        let auth = AuthInfo {
            keys: image
                .endpoints
                .iter()
                .map(|e| (e.endpoint.clone(), e.keys.len()))
                .collect(),
            locked_out: image
                .endpoints
                .iter()
                .flat_map(|e| &e.keys)
                .filter(|(_, _, _, locked_until)| *locked_until > now)
                .count(),
        };
        let rate_limit_counters = store
            .rate_limits
            .lock()
            .expect("rate limit lock")
            .table
            .image()
            .domains
            .into_iter()
            .map(|(domain, counters)| (domain, counters.len()))
            .collect();
        Ok(Inspection {
            rate_limit_counters,
            dir: path.display().to_string(),
            format: dir.format,
            this_build_writes: FORMAT,
            in_use,
            total_bytes: files.iter().map(|f| f.bytes).sum(),
            files,
            store_time_ms: seen_now,
            records,
            hosts,
            auth,
        })
    }
}

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "data dir {}", self.dir)?;
        let upgrade = if self.format < self.this_build_writes {
            " (older: serving from it rewrites it in this build's format)"
        } else {
            ""
        };
        writeln!(
            f,
            "format {} (this build writes format {}){upgrade}",
            self.format, self.this_build_writes
        )?;
        writeln!(
            f,
            "in use: {}",
            if self.in_use {
                "yes, a running process holds its LOCK (shown as it stood when read)"
            } else {
                "no"
            }
        )?;
        writeln!(f, "files:")?;
        for file in &self.files {
            let format = file
                .format
                .map_or_else(|| "no header".to_string(), |v| format!("format {v}"));
            writeln!(f, "  {:<28} {:>10} B  {format}", file.name, file.bytes)?;
        }
        writeln!(
            f,
            "  total {} B; {} log records after the snapshot",
            self.total_bytes, self.records
        )?;
        writeln!(f, "hosts: {}", self.hosts.len())?;
        for h in &self.hosts {
            writeln!(
                f,
                "  {}: admitted {}, queued {}, parked {}, retained {}; reservations open {} \
                 (uncertain {}), steps settled {}; limits revision {} ({}), total {}",
                h.host_id,
                h.admitted,
                h.queued,
                h.parked,
                h.retained,
                h.reservations_open,
                h.reservations_uncertain,
                h.steps_settled,
                h.limits_revision,
                h.limits_source,
                h.total_cap
            )?;
        }
        let keys: usize = self.auth.keys.iter().map(|(_, n)| n).sum();
        let by_endpoint: Vec<String> = self
            .auth
            .keys
            .iter()
            .map(|(e, n)| format!("{e} {n}"))
            .collect();
        writeln!(
            f,
            "auth: {keys} keys ({}), {} locked out as of the last change",
            if by_endpoint.is_empty() {
                "none".to_string()
            } else {
                by_endpoint.join(", ")
            },
            self.auth.locked_out
        )?;
        let counters: usize = self.rate_limit_counters.iter().map(|(_, n)| n).sum();
        let by_domain: Vec<String> = self
            .rate_limit_counters
            .iter()
            .map(|(d, n)| format!("{d} {n}"))
            .collect();
        writeln!(
            f,
            "rate limit counters: {counters}{}",
            if by_domain.is_empty() {
                String::new()
            } else {
                format!(" ({})", by_domain.join(", "))
            }
        )
    }
}
