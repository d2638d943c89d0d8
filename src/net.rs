//! The network edge: at most `grpc.max_connections` gRPC connections open at once. A connection
//! past the bound is closed as soon as it is accepted (and counted), so a flood of idle
//! connections cannot use up the process's file descriptors and leave real callers timing out;
//! they keep being served on the connections that are open and on those that free up. A
//! connection that sends nothing at all within its silence limit after being accepted (no HTTP/2
//! preface, no TLS hello) is closed, so silent connections cannot hold the places for long;
//! once a client has spoken, HTTP/2 keep-alive PINGs decide whether it is still there.
//!
//! Every connection writes through an [`Outbound`]: with a data dir under `interval` or `os`,
//! no byte leaves before the journal's records appended so far are written, and the answers
//! ready together leave in one send, with one write of the log before it.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::store::journal::{SendGate, SendGates};

/// File descriptors kept back from the connection bound for everything else the process opens
/// (the listeners, the store's connections, the admin port's callers, logs).
const RESERVED_FDS: usize = 128;

/// Open connections against their bound, and the ones refused.
#[derive(Debug)]
pub struct ConnectionGate {
    max: usize,
    open: AtomicUsize,
    refused: AtomicU64,
    /// When a refusal was last logged (ms on a monotonic clock), so a flood logs once a minute.
    last_warned_ms: AtomicU64,
    /// Since the gate was made: the warnings' time base (logs, not decisions).
    started: crate::clock::Stopwatch,
}

impl ConnectionGate {
    /// A gate for `max` connections, or fewer when the file-descriptor limit `fd_limit` (the
    /// soft `RLIMIT_NOFILE`, if known) leaves less room: then the lower bound is used and said
    /// in the log.
    pub fn new(max: usize, fd_limit: Option<usize>) -> Self {
        let room = fd_limit.map(|l| l.saturating_sub(RESERVED_FDS).max(1));
        let effective = match room {
            Some(room) if room < max => {
                tracing::warn!(
                    configured = max,
                    using = room,
                    fd_limit = fd_limit.unwrap_or_default(),
                    "grpc.max_connections is above what the open-file limit allows; raise the \
                     limit (ulimit -n, LimitNOFILE=) to allow more connections"
                );
                room
            }
            _ => max,
        };
        ConnectionGate {
            max: effective,
            open: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            last_warned_ms: AtomicU64::new(0),
            started: crate::clock::Stopwatch::start(),
        }
    }

    /// The bound in force.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections closed at once because the bound was reached, since start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    fn try_open(self: &Arc<Self>) -> Option<Slot> {
        let mut n = self.open.load(Ordering::Relaxed);
        loop {
            if n >= self.max {
                self.refuse();
                return None;
            }
            match self
                .open
                .compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Some(Slot(self.clone())),
                Err(now) => n = now,
            }
        }
    }

    fn refuse(&self) {
        let refused = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        // Offset by a minute, so the first refusal is logged.
        let now = self.started.elapsed().as_millis() as u64 + 60_000;
        let last = self.last_warned_ms.load(Ordering::Relaxed);
        if now >= last + 60_000
            && self
                .last_warned_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                max_connections = self.max,
                refused,
                "connection refused: grpc.max_connections are open (a flood of connections, \
                 or raise grpc.max_connections)"
            );
        }
    }
}

/// One open connection's place under the bound, given back when the connection closes.
#[derive(Debug)]
struct Slot(Arc<ConnectionGate>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The soft limit on open files of this process, from `/proc/self/limits` (Linux); `None`
/// elsewhere or when unlimited.
pub fn fd_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Accepted connections under a [`ConnectionGate`], with Nagle's algorithm off.
pub struct Incoming {
    listener: TcpListener,
    gate: Arc<ConnectionGate>,
    /// The store's send gate, when it has one.
    sends: Option<SendGates>,
    /// How long a new connection may stay silent before it is closed.
    silence_limit: Duration,
    /// After an accept error (out of file descriptors, say): wait a little before the next
    /// accept instead of spinning.
    backoff: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Incoming {
    pub fn new(
        listener: TcpListener,
        gate: Arc<ConnectionGate>,
        sends: Option<SendGates>,
        silence_limit: Duration,
    ) -> Self {
        Incoming {
            listener,
            gate,
            sends,
            silence_limit,
            backoff: None,
        }
    }
}

impl Stream for Incoming {
    type Item = io::Result<Conn>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(backoff) = &mut this.backoff {
                ready!(backoff.as_mut().poll(cx));
                this.backoff = None;
            }
            match ready!(this.listener.poll_accept(cx)) {
                Ok((stream, _)) => {
                    // Past the bound: dropped here, which closes it at once.
                    let Some(slot) = this.gate.try_open() else {
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let gate = this.sends.as_ref().map(SendGates::connection);
                    return Poll::Ready(Some(Ok(Conn {
                        stream: Outbound::new(stream, gate),
                        _slot: slot,
                        silence: Some(Box::pin(tokio::time::sleep(this.silence_limit))),
                    })));
                }
                Err(e) => {
                    tracing::warn!("accepting a connection failed: {e}");
                    this.backoff = Some(Box::pin(tokio::time::sleep(Duration::from_millis(50))));
                }
            }
        }
    }
}

/// An accepted connection holding its place under the bound.
#[derive(Debug)]
pub struct Conn {
    stream: Outbound<TcpStream>,
    _slot: Slot,
    /// Runs out when the client has sent nothing since it connected; gone once it has.
    silence: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.inner.connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.silence = None;
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                let silent_too_long = this
                    .silence
                    .as_mut()
                    .is_some_and(|s| s.as_mut().poll(cx).is_ready());
                if silent_too_long {
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client sent nothing after connecting",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// A connection's writing side. With a [`SendGate`] (a data dir under `interval` or `os`), the
/// journal's records appended so far are written before any of its bytes go, and a gate that
/// fails makes the write fail, which closes the connection. When there are records to write,
/// the write first yields until the worker has run the other calls it has ready (again while
/// the log grows, at most [`MAX_YIELDS`] times): their records go in the same write of the
/// log, and their answers in the same send (otherwise each answer costs a write of the log
/// and a send of its own).
#[derive(Debug)]
pub struct Outbound<S> {
    inner: S,
    gate: Option<SendGate>,
    /// Times the write under way has yielded (a flush ends it), and the records appended to
    /// the log when it last did.
    yields: u32,
    seen: u64,
}

/// A write yields at most this many times in a row.
const MAX_YIELDS: u32 = 32;

impl<S> Outbound<S> {
    pub fn new(inner: S, gate: Option<SendGate>) -> Self {
        Outbound {
            inner,
            gate,
            yields: 0,
            seen: 0,
        }
    }

    fn poll_ready_to_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(gate) = &self.gate else {
            return Poll::Ready(Ok(()));
        };
        if !gate.has_unwritten() {
            return Poll::Ready(Ok(()));
        }
        // Yield again while the log grows: calls are still running (each one that ends wakes
        // this connection to send its answer), until the worker has run them all.
        let appended = gate.appended();
        if self.yields == 0 || (self.yields < MAX_YIELDS && appended > self.seen) {
            self.yields += 1;
            self.seen = appended;
            // Tokio's yield: woken once the worker has nothing else ready (a plain self-wake
            // would also wake an idle worker to steal it, which costs more than it saves).
            let yield_now = std::pin::pin!(tokio::task::yield_now());
            if yield_now.poll(cx).is_ready() {
                cx.waker().wake_by_ref();
            }
            return Poll::Pending;
        }
        gate.ready()?;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Outbound<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Outbound<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_ready_to_send(cx))?;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_ready_to_send(cx))?;
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.yields = 0;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_leaves_room_for_the_processes_other_files() {
        assert_eq!(ConnectionGate::new(10_000, None).max(), 10_000);
        assert_eq!(ConnectionGate::new(10_000, Some(1_048_576)).max(), 10_000);
        assert_eq!(
            ConnectionGate::new(10_000, Some(1024)).max(),
            1024 - RESERVED_FDS
        );
        assert_eq!(ConnectionGate::new(10, Some(100)).max(), 1);
    }

    #[test]
    fn slots_are_given_back_when_connections_close() {
        let gate = Arc::new(ConnectionGate::new(2, None));
        let a = gate.try_open().expect("room");
        let b = gate.try_open().expect("room");
        assert!(gate.try_open().is_none());
        assert_eq!((gate.open(), gate.refused()), (2, 1));
        drop(a);
        assert_eq!(gate.open(), 1);
        let _c = gate.try_open().expect("room again");
        drop(b);
        assert_eq!(gate.open(), 1);
    }
}
