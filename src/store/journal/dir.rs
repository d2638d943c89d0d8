//! The data dir on disk before serving: opening and locking it, its `FORMAT`, the framing of
//! records and snapshot pieces, reading the newest snapshot and replaying the log (a torn tail
//! cut off, any other damage refused by name). [`DataDir::start`], in the parent module, turns
//! it into the serving [`super::Journal`].

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::{FORMAT, LOG_MAGIC, LOG_PREFIX, MAX_FRAME, OLDEST_FORMAT, SNAPSHOT_PREFIX};

/// Why a data dir cannot be served from. Each names the file and the problem.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("data dir {path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    #[error(
        "data dir {0}: in use by another live process (it holds {0}/LOCK); stop it, or give this one another --data-dir"
    )]
    Locked(PathBuf),
    #[error("{path}: {what}")]
    Damaged { path: PathBuf, what: String },
}

/// Append a framed payload that `write` puts at the end of `out`.
pub fn frame<E>(
    out: &mut Vec<u8>,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    write(out)?;
    let len = (out.len() - start - 8) as u32;
    let crc = crc32fast::hash(&out[start + 8..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// A frame that does not check out, and whether it is only a torn tail (what a crash in the
/// middle of a write leaves: a record cut short at the end of the file, or zeros after it).
struct BadFrame {
    at: usize,
    why: String,
    torn: bool,
}

/// Hand every frame of `buf` to `each` (with its offset); stop at the first bad one.
fn frames(buf: &[u8], mut each: impl FnMut(usize, &[u8])) -> Result<(), BadFrame> {
    let mut at = 0;
    while at < buf.len() {
        let rest = &buf[at..];
        if rest.iter().all(|b| *b == 0) {
            return Err(BadFrame {
                at,
                why: format!("{} zero bytes after the last record", rest.len()),
                torn: true,
            });
        }
        if rest.len() < 8 {
            return Err(BadFrame {
                at,
                why: "a record header cut short".into(),
                torn: true,
            });
        }
        let len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
        if len > MAX_FRAME {
            return Err(BadFrame {
                at,
                why: format!("a record length of {len} bytes"),
                torn: false,
            });
        }
        if rest.len() < 8 + len {
            return Err(BadFrame {
                at,
                why: format!("a record of {len} bytes cut short at {}", rest.len() - 8),
                torn: true,
            });
        }
        let payload = &rest[8..8 + len];
        if crc32fast::hash(payload) != crc {
            return Err(BadFrame {
                at,
                why: "a record whose checksum does not match".into(),
                // A last record that fails its checksum was being written when the machine
                // stopped; one with records after it was damaged later.
                torn: rest.len() == 8 + len,
            });
        }
        each(at, payload);
        at += 8 + len;
    }
    Ok(())
}

/// The newest snapshot as read: its format, and its pieces' payloads.
pub struct Snapshot {
    pub format: u32,
    pub pieces: Vec<Vec<u8>>,
}

/// An opened, locked data dir, before serving: read its snapshot, replay its log, then
/// [`DataDir::start`] the journal.
pub struct DataDir {
    pub(super) path: PathBuf,
    /// The held lock; `None` for a dir opened to be looked at ([`DataDir::open_read_only`]).
    pub(super) lock: Option<File>,
    /// The wall clock (µs since the Unix epoch) at the store's time 0.
    pub epoch_us: u64,
    /// True when the dir held no state before (made now, or empty).
    pub fresh: bool,
    pub(super) snapshot: Option<u64>,
    pub(super) segments: Vec<u64>,
    /// The format its `FORMAT` file names (this build's for a new dir).
    pub format: u32,
}

impl DataDir {
    /// Open (or make) the data dir at `path` and take its lock. A new dir's epoch is
    /// `epoch_us`.
    ///
    /// Fails when the dir cannot be made or read, another live process holds it, or its
    /// `FORMAT` is unreadable or newer than this authority's.
    pub fn open(path: &Path, epoch_us: u64) -> Result<DataDir, OpenError> {
        let io = |what: &'static str| {
            let path = path.to_path_buf();
            move |source| OpenError::Io { path, what, source }
        };
        if !path.exists() {
            // Readable by the service alone: it holds auth identities as callers sent them.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(io("cannot make it"))?;
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path.join("LOCK"))
            .map_err(io("cannot open its LOCK file"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(OpenError::Locked(path.to_path_buf()));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io("cannot lock it")(e)),
        }
        let (snapshot, segments) = list(path).map_err(io("cannot list it"))?;
        let format_path = path.join("FORMAT");
        let fresh = snapshot.is_none() && segments.is_empty();
        let (format, epoch_us) = match std::fs::read_to_string(&format_path) {
            Ok(text) => parse_format(&text).map_err(|what| OpenError::Damaged {
                path: format_path.clone(),
                what,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && fresh => {
                write_format(path, epoch_us).map_err(io("cannot write FORMAT"))?;
                (FORMAT, epoch_us)
            }
            Err(e) => {
                return Err(OpenError::Io {
                    path: format_path,
                    what: "cannot read it (the dir holds a log but no FORMAT)",
                    source: e,
                });
            }
        };
        Ok(DataDir {
            path: path.to_path_buf(),
            lock: Some(lock),
            epoch_us,
            fresh,
            snapshot,
            segments,
            format,
        })
    }

    /// Open the data dir at `path` to look at it, changing nothing: no lock is taken (a
    /// running server may hold it: see [`DataDir::held`]), nothing is made or written, and a
    /// torn last record is left where it is (a running server may be writing it). Its log is
    /// read as it stands when [`DataDir::replay`] reads it.
    ///
    /// Fails when it is not a data dir (no `FORMAT`), or its `FORMAT` is unreadable or newer
    /// than this authority's.
    pub fn open_read_only(path: &Path) -> Result<DataDir, OpenError> {
        let io = |what: &'static str| {
            let path = path.to_path_buf();
            move |source| OpenError::Io { path, what, source }
        };
        let format_path = path.join("FORMAT");
        let text = std::fs::read_to_string(&format_path).map_err(io(
            "cannot read its FORMAT (is it an admission-authority data dir?)",
        ))?;
        let (format, epoch_us) = parse_format(&text).map_err(|what| OpenError::Damaged {
            path: format_path,
            what,
        })?;
        let (snapshot, segments) = list(path).map_err(io("cannot list it"))?;
        Ok(DataDir {
            path: path.to_path_buf(),
            lock: None,
            epoch_us,
            fresh: snapshot.is_none() && segments.is_empty(),
            snapshot,
            segments,
            format,
        })
    }

    /// Whether another process holds the dir's lock now (a server serving from it).
    pub fn held(&self) -> bool {
        let Ok(file) = File::open(self.path.join("LOCK")) else {
            return false;
        };
        match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                false
            }
            Err(_) => true,
        }
    }

    /// The dir's log segments and snapshot files with their sizes and formats, oldest first
    /// (`None` for a file too short to name one).
    pub fn files(&self) -> Vec<(String, u64, Option<u32>)> {
        let mut names: Vec<String> = self
            .segments
            .iter()
            .map(|n| segment_name(*n))
            .chain(self.snapshot.map(snapshot_name))
            .collect();
        names.sort();
        names
            .into_iter()
            .map(|name| {
                let path = self.path.join(&name);
                let len = std::fs::metadata(&path).map_or(0, |m| m.len());
                let mut head = [0u8; 8];
                let format = File::open(&path)
                    .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
                    .ok()
                    .map(|()| u32::from(head[7]));
                (name, len, format)
            })
            .collect()
    }

    /// The newest snapshot's format and pieces, each checked; `None` when there is none.
    ///
    /// Fails when it cannot be read, is of a format this build does not read, or a piece is
    /// damaged (a snapshot is written whole and renamed into place, so any damage is damage).
    pub fn snapshot(&self) -> Result<Option<Snapshot>, OpenError> {
        let Some(n) = self.snapshot else {
            return Ok(None);
        };
        let path = self.path.join(snapshot_name(n));
        let bytes = std::fs::read(&path).map_err(|source| OpenError::Io {
            path: path.clone(),
            what: "cannot read it",
            source,
        })?;
        let damaged = |what: String| OpenError::Damaged {
            path: path.clone(),
            what,
        };
        let (version, body) = versioned(&bytes, SNAPSHOT_PREFIX, "snapshot").map_err(damaged)?;
        let mut pieces = Vec::new();
        frames(body, |_, p| pieces.push(p.to_vec())).map_err(|bad| {
            damaged(format!(
                "damaged at byte {}: {}",
                bad.at + SNAPSHOT_PREFIX.len() + 1,
                bad.why
            ))
        })?;
        Ok(Some(Snapshot {
            format: version,
            pieces,
        }))
    }

    /// Hand every record of the log since the newest snapshot to `each` with its segment's
    /// format, oldest first. A torn last record of the last segment is cut off (and logged);
    /// any other damage fails.
    ///
    /// Fails when a segment cannot be read, is not a log of a format this build reads, or is
    /// damaged before its end; or when `each` fails (a record this authority cannot decode).
    pub fn replay(
        &self,
        mut each: impl FnMut(u32, &[u8]) -> Result<(), String>,
    ) -> Result<u64, OpenError> {
        let from = self.snapshot.unwrap_or(1);
        let mut count = 0;
        let segments: Vec<u64> = self
            .segments
            .iter()
            .copied()
            .filter(|n| *n >= from)
            .collect();
        // The snapshot holds everything before segment `from`, and every segment from it on
        // must be there: a gap (a dir copied file by file from a running process, a file
        // removed by hand) would silently lose the changes it held.
        for (i, n) in segments.iter().enumerate() {
            let expected = from + i as u64;
            if *n != expected {
                return Err(OpenError::Damaged {
                    path: self.path.join(segment_name(expected)),
                    what: format!(
                        "missing: the log goes on in {} but this segment, which {}, is not there",
                        segment_name(*n),
                        if self.snapshot.is_some() {
                            "the newest snapshot needs"
                        } else {
                            "a dir without a snapshot starts with"
                        }
                    ),
                });
            }
        }
        for (i, n) in segments.iter().enumerate() {
            let path = self.path.join(segment_name(*n));
            let bytes = std::fs::read(&path).map_err(|source| OpenError::Io {
                path: path.clone(),
                what: "cannot read it",
                source,
            })?;
            let damaged = |what: String| OpenError::Damaged {
                path: path.clone(),
                what,
            };
            let last = i + 1 == segments.len();
            if bytes.len() < LOG_MAGIC.len() && LOG_MAGIC.starts_with(&bytes) {
                // Made by a process that stopped before its header was written: no records.
                continue;
            }
            let (version, body) = versioned(&bytes, LOG_PREFIX, "log").map_err(damaged)?;
            let mut failed = None;
            let result = frames(body, |at, payload| {
                if failed.is_none() {
                    match each(version, payload) {
                        Ok(()) => count += 1,
                        Err(e) => failed = Some((at, e)),
                    }
                }
            });
            if let Some((at, e)) = failed {
                return Err(damaged(format!(
                    "record at byte {}: {e}",
                    at + LOG_MAGIC.len()
                )));
            }
            if let Err(bad) = result {
                let offset = bad.at + LOG_MAGIC.len();
                if !(bad.torn && last) {
                    return Err(damaged(format!(
                        "damaged at byte {offset}: {}{}",
                        bad.why,
                        if last {
                            ""
                        } else {
                            " (not the last segment, so not a torn write)"
                        }
                    )));
                }
                if self.lock.is_none() {
                    // Looked at, not served: a server may be writing that record now.
                    continue;
                }
                tracing::warn!(
                    file = %path.display(),
                    at = offset,
                    "dropping a torn last record ({}): the write it belonged to was never \
                     acknowledged",
                    bad.why
                );
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_len(offset as u64).and_then(|()| f.sync_all()));
                f.map_err(|source| OpenError::Io {
                    path: path.clone(),
                    what: "cannot cut its torn last record off",
                    source,
                })?;
            }
        }
        Ok(count)
    }
}

/// The newest snapshot's number and the log segments' numbers (sorted) in `path`.
fn list(path: &Path) -> std::io::Result<(Option<u64>, Vec<u64>)> {
    let mut snapshot = None;
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if let Some(n) = numbered(&name, "snapshot-", ".aas") {
            snapshot = snapshot.max(Some(n));
        } else if let Some(n) = numbered(&name, "log-", ".aal") {
            segments.push(n);
        }
    }
    segments.sort_unstable();
    Ok((snapshot, segments))
}

/// A file's format and the bytes after its magic (`prefix` and a format byte), or why it
/// cannot be read: not such a file at all, or of a format this build does not read.
fn versioned<'a>(bytes: &'a [u8], prefix: &[u8], what: &str) -> Result<(u32, &'a [u8]), String> {
    let rest = bytes
        .strip_prefix(prefix)
        .ok_or_else(|| format!("not an admission-authority {what} file"))?;
    let (&version, body) = rest
        .split_first()
        .ok_or_else(|| format!("an admission-authority {what} file cut short in its header"))?;
    let version = u32::from(version);
    if version > FORMAT {
        return Err(format!(
            "a {what} of format {version}, written by a newer admission-authority (this one \
             reads formats {OLDEST_FORMAT} to {FORMAT})"
        ));
    }
    if version < OLDEST_FORMAT {
        return Err(format!(
            "a {what} of format {version}, which this build does not read"
        ));
    }
    Ok((version, body))
}

/// Write the dir's `FORMAT` file: this build's format, and the dir's epoch.
///
/// Fails when the file cannot be written and synced.
pub fn write_format(dir: &Path, epoch_us: u64) -> std::io::Result<()> {
    write_synced(
        dir,
        "FORMAT",
        &[
            format!("admission-authority data dir\nformat {FORMAT}\nepoch_us {epoch_us}\n")
                .as_bytes(),
        ],
    )
}

pub(super) fn numbered(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?
        .strip_suffix(suffix)?
        .parse()
        .ok()
}

pub(super) fn segment_name(n: u64) -> String {
    format!("log-{n:016}.aal")
}

pub(super) fn snapshot_name(n: u64) -> String {
    format!("snapshot-{n:016}.aas")
}

fn parse_format(text: &str) -> Result<(u32, u64), String> {
    let mut format = None;
    let mut epoch = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("format ") {
            format = v.trim().parse::<u32>().ok();
        } else if let Some(v) = line.strip_prefix("epoch_us ") {
            epoch = v.trim().parse::<u64>().ok();
        }
    }
    match (format, epoch) {
        (Some(f), _) if f > FORMAT => Err(format!(
            "format {f} was written by a newer admission-authority (this one reads formats \
             {OLDEST_FORMAT} to {FORMAT}); run the newer version, or move the dir away to start \
             empty"
        )),
        (Some(f), _) if f < OLDEST_FORMAT => Err(format!(
            "format {f} is older than this admission-authority reads (formats {OLDEST_FORMAT} \
             to {FORMAT})"
        )),
        (Some(f), Some(e)) => Ok((f, e)),
        _ => Err("not a FORMAT file of an admission-authority data dir".into()),
    }
}

/// Write `parts` one after the other as file `name` of `dir`, whole or not at all: to a
/// temporary file, fsynced, then renamed into place (and the dir fsynced).
pub(super) fn write_synced(dir: &Path, name: &str, parts: &[&[u8]]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp)?;
    for part in parts {
        f.write_all(part)?;
    }
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

pub(super) fn new_segment(dir: &Path, n: u64) -> std::io::Result<File> {
    let mut f = OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(dir.join(segment_name(n)))?;
    f.write_all(LOG_MAGIC)?;
    f.sync_all()?;
    File::open(dir)?.sync_all()?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in payloads {
            frame::<()>(&mut out, |v| {
                v.extend_from_slice(p);
                Ok(())
            })
            .unwrap();
        }
        out
    }

    fn read(buf: &[u8]) -> (Vec<Vec<u8>>, Option<(usize, bool)>) {
        let mut got = Vec::new();
        let bad = frames(buf, |_, p| got.push(p.to_vec())).err();
        (got, bad.map(|b| (b.at, b.torn)))
    }

    #[test]
    fn frames_round_trip() {
        let buf = framed(&[b"one", b"", b"three"]);
        let (got, bad) = read(&buf);
        assert_eq!(got, vec![b"one".to_vec(), vec![], b"three".to_vec()]);
        assert!(bad.is_none());
    }

    #[test]
    fn a_record_cut_short_at_the_end_is_torn() {
        let buf = framed(&[b"one", b"two"]);
        for cut in 1..11 {
            let (got, bad) = read(&buf[..buf.len() - cut]);
            assert_eq!(got, vec![b"one".to_vec()], "cut {cut}");
            assert_eq!(bad, Some((11, true)), "cut {cut}");
        }
        let mut zeros = buf.clone();
        zeros.extend_from_slice(&[0; 100]);
        assert_eq!(read(&zeros).1, Some((buf.len(), true)));
    }

    #[test]
    fn damage_before_the_end_is_not_torn() {
        let mut buf = framed(&[b"one", b"two", b"three"]);
        buf[9] ^= 0xff; // inside "one"'s payload
        let (got, bad) = read(&buf);
        assert!(got.is_empty());
        assert_eq!(bad, Some((0, false)));
        let mut last = framed(&[b"one", b"two"]);
        let n = last.len();
        last[n - 1] ^= 0xff; // the last record's payload: a torn write of it
        assert_eq!(read(&last).1, Some((11, true)));
    }

    #[test]
    fn format_files_of_newer_authorities_are_refused() {
        assert_eq!(parse_format("format 1\nepoch_us 42\n"), Ok((1, 42)));
        assert_eq!(parse_format("format 5\nepoch_us 42\n"), Ok((5, 42)));
        let newer = parse_format("format 6\nepoch_us 42\n").unwrap_err();
        assert!(
            newer.contains("format 6") && newer.contains("formats 1 to 5"),
            "{newer}"
        );
        assert!(parse_format("hello").is_err());
    }
}
