//! The connection loop: accept under a cap, serve HTTP/1.1 with hyper, and hold every
//! connection to its deadlines (whole head, keep-alive idle, a stalled response write).
//!
//! warp's own server has no head deadline and logs every client hang-up at ERROR, so the
//! routes (one function of the request, [`RouteHandler`]) run on this loop instead. Client
//! misbehaviour (hang-ups, resets,
//! deadlines, shedding at the cap) is counted and summarised in the log at most once per
//! `REPORT_INTERVAL`; ERROR is left for our own failures.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

use crate::config::ConnectionLimits;

/// How often counted connection events are summarised in the log.
pub(crate) const REPORT_INTERVAL: Duration = Duration::from_secs(10);
/// The pause after an accept error that is not about one connection (e.g. EMFILE), so the
/// loop never spins.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// Written, best effort and without waiting, to a connection shed at the cap.
const SHED_RESPONSE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 92\r\n\r\n{\"error\":{\"code\":\"overloaded\",\"message\":\"too many open connections; retry after a second\"}}\n";

/// Plain counters of connection events, read by tests and by the operations metrics.
#[derive(Debug, Default)]
pub struct ConnectionCounters {
    /// Connections accepted and served.
    pub accepted: AtomicU64,
    /// Connections closed at once because the cap was reached.
    pub shed: AtomicU64,
    /// accept() failures (other than a client gone before accept).
    pub accept_errors: AtomicU64,
    /// Connections closed because a request head was not complete in time.
    pub header_timeouts: AtomicU64,
    /// Keep-alive connections closed after the idle timeout.
    pub idle_closed: AtomicU64,
    /// Connections closed because the client stopped reading a response.
    pub write_timeouts: AtomicU64,
    /// Paid request bodies that missed their deadline (408).
    pub body_timeouts: AtomicU64,
    /// Connections that ended with a client-side error: hang-up mid-request, reset, bad HTTP.
    pub client_errors: AtomicU64,
    /// Connections currently open.
    pub open: AtomicU64,
}

impl ConnectionCounters {
    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> [u64; 7] {
        [
            &self.shed,
            &self.accept_errors,
            &self.header_timeouts,
            &self.idle_closed,
            &self.write_timeouts,
            &self.body_timeouts,
            &self.client_errors,
        ]
        .map(|c| c.load(Ordering::Relaxed))
    }

    /// Counts one paid body that missed its deadline.
    pub fn body_timed_out(&self) {
        Self::add(&self.body_timeouts);
    }
}

/// Logs one summary line per interval in which any counted event happened.
async fn report_periodically(counters: Arc<ConnectionCounters>) {
    let mut last = counters.snapshot();
    let mut ticker = tokio::time::interval(REPORT_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let now = counters.snapshot();
        let delta: Vec<u64> = now.iter().zip(last).map(|(n, l)| n - l).collect();
        if delta.iter().any(|d| *d > 0) {
            let interval_s = REPORT_INTERVAL.as_secs();
            let open = counters.open.load(Ordering::Relaxed);
            let [
                shed,
                accept_errors,
                header_timeouts,
                idle_closed,
                write_timeouts,
                body_timeouts,
                client_errors,
            ] = [0, 1, 2, 3, 4, 5, 6].map(|i| delta[i]);
            if shed > 0 || accept_errors > 0 {
                tracing::warn!(
                    interval_s,
                    open,
                    shed,
                    accept_errors,
                    header_timeouts,
                    idle_closed,
                    write_timeouts,
                    body_timeouts,
                    client_errors,
                    "connections shed at the cap or refused by accept in the last interval"
                );
            } else {
                tracing::info!(
                    interval_s,
                    open,
                    header_timeouts,
                    idle_closed,
                    write_timeouts,
                    body_timeouts,
                    client_errors,
                    "client connections closed by deadlines or by the client in the last interval"
                );
            }
        }
        last = now;
    }
}

/// What a connection is doing, for its deadlines.
const IDLE: u8 = 0;
const HEAD: u8 = 1;
const BUSY: u8 = 2;

/// One connection's progress, shared by its I/O wrapper, its service and its deadline loop
/// (all on the connection's own task).
struct Progress {
    base: Instant,
    phase: AtomicU8,
    /// Milliseconds after `base` when the current phase began.
    since_ms: AtomicU64,
    /// Milliseconds after `base` + 1 when a response write first blocked; 0 = not blocked.
    write_blocked_ms: AtomicU64,
    served_any: AtomicBool,
}

/// Why a connection was closed by us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    Head,
    Idle,
    Write,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            base: Instant::now(),
            phase: AtomicU8::new(IDLE),
            since_ms: AtomicU64::new(0),
            write_blocked_ms: AtomicU64::new(0),
            served_any: AtomicBool::new(false),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn enter(&self, phase: u8) {
        self.phase.store(phase, Ordering::Relaxed);
        self.since_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Bytes arrived: on an idle keep-alive connection they start the next request's head.
    /// The first request's head counts from connect, so its clock is left running.
    fn on_read(&self) {
        if self.phase.load(Ordering::Relaxed) == IDLE {
            if self.served_any.load(Ordering::Relaxed) {
                self.enter(HEAD);
            } else {
                self.phase.store(HEAD, Ordering::Relaxed);
            }
        }
    }

    fn on_write_blocked(&self) {
        if self.write_blocked_ms.load(Ordering::Relaxed) == 0 {
            self.write_blocked_ms
                .store(self.now_ms().saturating_add(1), Ordering::Relaxed);
        }
    }

    fn on_write_drained(&self) {
        if self.write_blocked_ms.swap(0, Ordering::Relaxed) != 0
            && self.phase.load(Ordering::Relaxed) == IDLE
        {
            self.enter(IDLE);
        }
    }

    fn on_request(&self) {
        // A request being served has no deadline of its own, so no clock read here.
        self.phase.store(BUSY, Ordering::Relaxed);
    }

    fn on_response(&self) {
        self.served_any.store(true, Ordering::Relaxed);
        self.enter(IDLE);
    }

    /// The earliest deadline now running, with what it guards.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<(Instant, Expiry)> {
        let since = self.since_ms.load(Ordering::Relaxed);
        let phase_deadline = match self.phase.load(Ordering::Relaxed) {
            IDLE if self.served_any.load(Ordering::Relaxed) => {
                Some((since + limits.idle_timeout_ms, Expiry::Idle))
            }
            IDLE | HEAD => Some((since + limits.header_read_timeout_ms, Expiry::Head)),
            _ => None,
        };
        let blocked = self.write_blocked_ms.load(Ordering::Relaxed);
        let write_deadline = (blocked != 0).then(|| {
            (
                blocked - 1 + limits.response_write_timeout_ms,
                Expiry::Write,
            )
        });
        [phase_deadline, write_deadline]
            .into_iter()
            .flatten()
            .min_by_key(|(at, _)| *at)
            .map(|(at, why)| (self.base + Duration::from_millis(at), why))
    }
}

/// The client socket, reporting reads and blocked writes to its connection's deadlines.
struct TrackedStream {
    stream: TcpStream,
    progress: Arc<Progress>,
}

impl AsyncRead for TrackedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.progress.on_read();
        }
        result
    }
}

impl AsyncWrite for TrackedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.stream).poll_write(cx, buf);
        if result.is_pending() {
            self.progress.on_write_blocked();
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        if result.is_pending() {
            self.progress.on_write_blocked();
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    /// hyper flushes once its whole write buffer reached the socket.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let result = Pin::new(&mut self.stream).poll_flush(cx);
        if matches!(result, Poll::Ready(Ok(()))) {
            self.progress.on_write_drained();
        }
        result
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Accepts until `shutdown` turns true, then lets open connections finish and returns.
pub(crate) async fn serve<S>(
    listener: TcpListener,
    routes: S,
    limits: ConnectionLimits,
    counters: Arc<ConnectionCounters>,
    mut shutdown: watch::Receiver<bool>,
) where
    S: RouteHandler,
{
    let cap = limits.max_connections;
    let permits = Arc::new(Semaphore::new(cap));
    let reporter = tokio::spawn(report_periodically(counters.clone()));
    let mut cap_warned_at: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                on_accept_error(&counters, &error).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            shed(&stream, &counters, cap, &mut cap_warned_at);
            continue;
        };
        ConnectionCounters::add(&counters.accepted);
        let task = Connection {
            limits,
            counters: counters.clone(),
            shutdown: shutdown.clone(),
            _permit: permit,
        };
        tokio::spawn(task.run(stream, routes.clone()));
    }
    drop(listener);
    // Every connection holds a permit until it ends: all of them back means all are done.
    let all = u32::try_from(cap).unwrap_or(u32::MAX);
    let _ = permits.acquire_many(all).await;
    reporter.abort();
}

/// Sheds a connection beyond the cap: one non-blocking write of a 503, then close. The first
/// shed after a quiet interval is logged at once; the rest are counted for the summary.
fn shed(
    stream: &TcpStream,
    counters: &ConnectionCounters,
    cap: usize,
    warned_at: &mut Option<Instant>,
) {
    ConnectionCounters::add(&counters.shed);
    // Whatever the client already sent is read first, so the close is a FIN after the 503
    // rather than a reset that could discard it.
    let mut sink = [0u8; 2048];
    let _ = stream.try_read(&mut sink);
    let _ = stream.try_write(SHED_RESPONSE);
    if warned_at.is_none_or(|at| at.elapsed() >= REPORT_INTERVAL) {
        *warned_at = Some(Instant::now());
        tracing::warn!(
            max_connections = cap,
            "connection cap reached: new connections are shed with 503 until some close"
        );
    }
}

async fn on_accept_error(counters: &ConnectionCounters, error: &io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        tracing::debug!(%error, "client gone before accept");
        return;
    }
    ConnectionCounters::add(&counters.accept_errors);
    tracing::debug!(%error, "accept failed; pausing");
    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
}

/// One accepted connection and what it needs to run.
struct Connection {
    limits: ConnectionLimits,
    counters: Arc<ConnectionCounters>,
    shutdown: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
}

impl Connection {
    async fn run<S: RouteHandler>(self, stream: TcpStream, routes: S) {
        let mut shutdown = self.shutdown.clone();
        self.counters.open.fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_nodelay(true);
        let progress = Arc::new(Progress::new());
        let io = TokioIo::new(TrackedStream {
            stream,
            progress: progress.clone(),
        });
        let service = RouteService {
            routes,
            progress: progress.clone(),
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.header_read_timeout(None);
        let connection = builder.serve_connection(io, service);
        let mut watch = DeadlineWatch {
            connection: std::pin::pin!(connection),
            stop_seen: self.shutdown.clone(),
            stop: std::pin::pin!(shutdown.wait_for(|stop| *stop)),
            stop_registered: false,
            closing: false,
            timer: std::pin::pin!(tokio::time::sleep_until(far_future())),
            armed: far_future(),
            timer_waiting: false,
        };
        match std::future::poll_fn(|cx| watch.poll(cx, &progress, &self.limits)).await {
            Ok(result) => self.ended(result),
            Err(why) => self.expired(why),
        }
        self.counters.open.fetch_sub(1, Ordering::Relaxed);
    }

    fn expired(&self, why: Expiry) {
        let counter = match why {
            Expiry::Head => &self.counters.header_timeouts,
            Expiry::Idle => &self.counters.idle_closed,
            Expiry::Write => &self.counters.write_timeouts,
        };
        ConnectionCounters::add(counter);
        tracing::debug!(reason = ?why, "connection closed at its deadline");
    }

    fn ended(&self, result: Result<(), hyper::Error>) {
        let Err(error) = result else { return };
        if error.is_user() {
            tracing::error!(%error, "connection failed on our side");
        } else {
            ConnectionCounters::add(&self.counters.client_errors);
            tracing::debug!(%error, "connection ended by the client");
        }
    }
}

/// A connection held to its deadlines. Everything that moves a deadline (reads, requests,
/// responses, blocked writes) happens inside the connection's own poll, on this task, so the
/// deadline is read after each poll: no notification and no extra wake-up per request. The
/// timer is re-armed only when the deadline comes earlier than the armed instant, or when it
/// fires before a deadline that has since moved later.
struct DeadlineWatch<'a, C, W> {
    connection: Pin<&'a mut C>,
    /// The server's stop signal.
    stop: Pin<&'a mut W>,
    /// Whether `stop` has been polled, leaving this task's waker with the signal.
    stop_registered: bool,
    /// The same signal, read without polling `stop`.
    stop_seen: watch::Receiver<bool>,
    closing: bool,
    timer: Pin<&'a mut tokio::time::Sleep>,
    armed: Instant,
    /// Whether `timer` has been polled since it was armed at `armed`.
    timer_waiting: bool,
}

impl<C: ServedConnection, W: Future> DeadlineWatch<'_, C, W> {
    /// Ready with the connection's end, or with the deadline that closed it.
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        progress: &Progress,
        limits: &ConnectionLimits,
    ) -> Poll<Result<Result<(), hyper::Error>, Expiry>> {
        loop {
            if let Poll::Ready(result) = self.connection.as_mut().poll(cx) {
                return Poll::Ready(Ok(result));
            }
            if self.closing || !self.stopping(cx) {
                break;
            }
            // Stopping: let hyper finish the request in progress, then end.
            self.closing = true;
            self.connection.as_mut().graceful_shutdown();
        }
        let Some((at, why)) = progress.deadline(limits) else {
            return Poll::Pending;
        };
        if at < self.armed {
            self.rearm(at);
        }
        // A timer polled since it was armed wakes this task when it fires (never before its
        // instant); until then another poll would only leave the same waker again.
        if self.timer_waiting && Instant::now() < self.armed {
            return Poll::Pending;
        }
        // At most twice: a timer that fired for an earlier deadline is re-armed once.
        for _ in 0..2 {
            if self.timer.as_mut().poll(cx).is_pending() {
                self.timer_waiting = true;
                return Poll::Pending;
            }
            if at <= Instant::now() {
                return Poll::Ready(Err(why));
            }
            self.rearm(at);
        }
        Poll::Pending
    }

    /// Whether the server is stopping. `stop` is polled once: that leaves this task's waker
    /// with the signal, which wakes this same task when it is sent. After that the signal is
    /// read, not polled: a poll took the signal's lock and cost ≈ 190 instructions, twice per
    /// request.
    fn stopping(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.stop_registered {
            self.stop_registered = true;
            return self.stop.as_mut().poll(cx).is_ready();
        }
        match self.stop_seen.has_changed() {
            Ok(changed) => changed && *self.stop_seen.borrow(),
            // The sender is gone, which ends `stop` too.
            Err(_) => true,
        }
    }

    fn rearm(&mut self, at: Instant) {
        self.timer.as_mut().reset(at);
        self.armed = at;
        self.timer_waiting = false;
    }
}

/// hyper's HTTP/1.1 connection as the deadline watch drives it.
trait ServedConnection: Future<Output = Result<(), hyper::Error>> {
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, S> ServedConnection for hyper::server::conn::http1::Connection<I, S>
where
    S: hyper::service::HttpService<Incoming>,
    S::ResBody: 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    Self: Future<Output = Result<(), hyper::Error>>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper::server::conn::http1::Connection::graceful_shutdown(self)
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400)
}

/// The routes: a function from a request to its response, called once per request.
pub(crate) trait RouteHandler: Clone + Send + 'static {
    /// The response's future: boxed once, by the connection, with its bookkeeping.
    type Future: Future<Output = http::Response<Full<Bytes>>> + Send + 'static;
    /// Starts answering `request`.
    fn call(&self, request: http::Request<Incoming>) -> Self::Future;
}

impl<F, R> RouteHandler for F
where
    F: Fn(http::Request<Incoming>) -> R + Clone + Send + 'static,
    R: Future<Output = http::Response<Full<Bytes>>> + Send + 'static,
{
    type Future = R;

    fn call(&self, request: http::Request<Incoming>) -> R {
        self(request)
    }
}

/// The routes, with the connection told when a request starts and its response is ready.
struct RouteService<S> {
    routes: S,
    progress: Arc<Progress>,
}

impl<S: RouteHandler> hyper::service::Service<http::Request<Incoming>> for RouteService<S> {
    type Response = http::Response<Full<Bytes>>;
    type Error = Infallible;
    // Boxed: the handler's state machine (the whole paid path) is large, and an unboxed
    // future would be stored in every connection task, idle ones too.
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: http::Request<Incoming>) -> Self::Future {
        self.progress.on_request();
        let progress = self.progress.clone();
        // A combinator, not an `async` block: the block kept the handler's future as a
        // capture and moved it into its own slot on the first poll (≈ 1.5 KB copied per
        // request), and its box was twice the handler's size.
        Box::pin(self.routes.call(request).map(move |response| {
            progress.on_response();
            Ok(response)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shed_response_declares_its_body_length() {
        let text = std::str::from_utf8(SHED_RESPONSE).expect("ascii");
        let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
        let declared = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length: "))
            .and_then(|n| n.parse::<usize>().ok());
        assert_eq!(declared, Some(body.len()));
        assert!(head.starts_with("HTTP/1.1 503 ") && head.contains("retry-after: "));
    }
}
