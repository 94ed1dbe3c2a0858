//! Several JSON-RPC endpoints per chain: which chain each one serves (`eth_chainId`), how
//! healthy each one is, and a transport that fails over **one endpoint at a time**.
//!
//! Why not alloy's `FallbackLayer`: it sends each request to several transports at once and
//! ranks them by latency, which multiplies outbound calls past SPEC's per-evaluation method
//! limits and breaks same-block reads. Here one logical read gets at most
//! [`MAX_ATTEMPTS`] attempts, each to one endpoint, each counted by the gateway:
//!
//! - an endpoint that errors, times out or answers 429 cools down (for its `Retry-After` when
//!   it sends one) and the read moves to the next endpoint in configured order;
//! - a node that does not know the block yet ("header not found", "unknown block": a lagging
//!   node behind a load balancer) is asked again after [`LAG_RETRY_DELAY`], the same endpoint
//!   first; one still behind then is passed over for a moment, so the next reads go to the
//!   next endpoint;
//! - reads of one transport stay on the endpoint that last answered, so an observation's
//!   block-pinned reads go to the node that told it the block;
//! - an HTTP 413 to an `eth_getLogs` (QuickNode's answer to a range over its plan's), or an
//!   HTTP 400 carrying a JSON-RPC error that names no other cause (Alchemy's), is the request's fault, not the
//!   endpoint's: it goes back to the log search, which narrows the range, and the endpoint is
//!   neither cooled down nor left. Either status to any other read is an endpoint failure
//!   like any other.
//!
//! An endpoint answering another chain's id is never used; one whose chain is unconfirmed
//! (never asked, or silent when last asked) is asked `eth_chainId` before a read uses it, and
//! a read of one still silent carries `eth_chainId` in its own batch (`chain_proof`): its
//! answer counts only if the chain is ours. The payment verdicts' reader
//! ([`FailoverRpc::verified_only`]) passes over one still silent.
//! Health is shared by every reader in the process (a registry keyed by the endpoint's
//! position and a digest of its URL), so a cool-down learnt by one paid call spares the next. Metrics and log lines name an endpoint
//! only by position (`eip155:8453#1`) and setting, never by its URL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::task;
use std::time::{Duration, Instant};

use alloy::network::Ethereum;
use alloy::providers::RootProvider;
use alloy::rpc::client::RpcClient;
use alloy::rpc::json_rpc::{RequestPacket, ResponsePacket};
use alloy::transports::{TransportError, TransportErrorKind, TransportFut};
use sha2::{Digest, Sha256};

use crate::chain::chain_proof;
use crate::chain::networks::{self, Chain};
use crate::chain::rpc::{self, Attempt};
use crate::config::{Config, Secret};
use crate::net::gateway::{Gateway, Upstream};
use crate::support::metrics::metrics;

/// Attempts of one logical read, across endpoints and lag retries together.
pub(crate) const MAX_ATTEMPTS: usize = 2;
/// Wait before asking a lagging node again: a block reaches every node within a second or so.
pub(crate) const LAG_RETRY_DELAY: Duration = Duration::from_millis(250);
/// The least time left worth a lag retry: a node answers a known block in milliseconds.
const MIN_ATTEMPT_TIME: Duration = Duration::from_millis(250);
/// Pause for an endpoint that lagged on a read and on its retry (a node more than a block
/// behind): as long as after an error, and a lone endpoint is still asked meanwhile.
const LAG_COOL_DOWN: Duration = DEFAULT_COOL_DOWN;
/// Cool-down after an error or timeout without `Retry-After`: short, so that a lone endpoint
/// with a blip is not lost for long.
const DEFAULT_COOL_DOWN: Duration = Duration::from_secs(5);
/// The longest `Retry-After` honoured: a provider's hour-long answer would idle the chain.
const MAX_COOL_DOWN: Duration = Duration::from_secs(300);
/// Answer timeout of one `eth_chainId` check (start-up and readiness loop).
pub(crate) const IDENTITY_CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// What `eth_chainId` said about an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Identity {
    /// Not asked yet.
    Unchecked,
    /// It serves the chain it is configured for.
    Verified,
    /// It serves another chain (the id it answered).
    Mismatch(u64),
    /// It did not answer `eth_chainId` usably.
    Unanswered,
}

#[derive(Debug)]
struct HealthState {
    cool_until: Option<Instant>,
    /// The cool-down is the endpoint's own `Retry-After`: honoured even when no other
    /// endpoint is left. A cool-down of ours (an error, a timeout) yields to having none.
    cool_asked: bool,
    identity: Identity,
    /// When a read last asked `eth_chainId` (start-up's and `/readyz`'s checks do not count).
    identity_asked: Option<Instant>,
}

/// The shared health of one endpoint.
#[derive(Debug)]
struct Health(Mutex<HealthState>);

impl Health {
    fn lock(&self) -> std::sync::MutexGuard<'_, HealthState> {
        // A poisoned lock only means another reader panicked mid-update; the state is plain.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

type RegistryKey = (String, [u8; 32]);

static REGISTRY: LazyLock<Mutex<HashMap<RegistryKey, Arc<Health>>>> = LazyLock::new(Mutex::default);

fn health_of(label: &str, url: &Secret) -> Arc<Health> {
    let digest: [u8; 32] = Sha256::digest(url.expose().as_bytes()).into();
    let mut registry = REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    registry
        .entry((label.to_string(), digest))
        .or_insert_with(|| {
            Arc::new(Health(Mutex::new(HealthState {
                cool_until: None,
                cool_asked: false,
                identity: Identity::Unchecked,
                identity_asked: None,
            })))
        })
        .clone()
}

/// Endpoint sets already built, by role, chain and the configured (setting, URL) pairs.
/// A process normally has one configuration; tests start many, hence the bound.
type SetKey = (&'static str, &'static str, Vec<(String, String)>);
static SETS: LazyLock<Mutex<HashMap<SetKey, Arc<EndpointSet>>>> = LazyLock::new(Mutex::default);
const MAX_MEMOIZED_SETS: usize = 256;

fn memoized(
    role: &'static str,
    chain: Chain,
    configured: &[(String, &Secret)],
    build: impl FnOnce() -> EndpointSet,
) -> Arc<EndpointSet> {
    let key: SetKey = (
        role,
        chain.caip2,
        configured
            .iter()
            .map(|(setting, url)| (setting.clone(), url.expose().to_string()))
            .collect(),
    );
    let mut sets = SETS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(set) = sets.get(&key) {
        return Arc::clone(set);
    }
    if sets.len() >= MAX_MEMOIZED_SETS {
        sets.clear();
    }
    let set = Arc::new(build());
    sets.insert(key, Arc::clone(&set));
    set
}

/// One configured endpoint. Its Debug names the setting and the label, never the URL (a
/// provider's key is often in its path).
#[derive(Clone)]
pub(crate) struct Endpoint {
    /// The setting it came from (`rpc_url_eip155_1`, `rpc_urls_eip155_1[2]`).
    pub setting: String,
    /// Its position label (`eip155:1#1`), the only name metrics and responses use.
    pub label: String,
    url: Option<reqwest::Url>,
    health: Arc<Health>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("setting", &self.setting)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint from its setting, its position label and its URL.
    pub(crate) fn configured(setting: &str, label: &str, url: &Secret) -> Endpoint {
        Endpoint::new(setting.to_string(), label.to_string(), url)
    }

    fn new(setting: String, label: String, url: &Secret) -> Endpoint {
        Endpoint {
            health: health_of(&label, url),
            url: reqwest::Url::parse(url.expose()).ok(),
            setting,
            label,
        }
    }

    /// What `eth_chainId` last said.
    pub(crate) fn identity(&self) -> Identity {
        self.health.lock().identity
    }

    /// Whether a read must first ask this endpoint's chain, claimed for this read: its chain
    /// is unconfirmed (never asked, or silent at start-up or when a read last asked), and no
    /// read asked in the last [`IDENTITY_RECHECK`]. The claim is taken before the question,
    /// so reads at once ask once.
    fn claim_chain_check(&self, now: Instant) -> bool {
        let mut health = self.health.lock();
        let unconfirmed = matches!(health.identity, Identity::Unchecked | Identity::Unanswered);
        let due = health
            .identity_asked
            .is_none_or(|asked| now.duration_since(asked) >= IDENTITY_RECHECK);
        if unconfirmed && due {
            health.identity_asked = Some(now);
        }
        unconfirmed && due
    }

    fn cooling(&self, now: Instant) -> bool {
        self.health
            .lock()
            .cool_until
            .is_some_and(|until| until > now)
    }

    /// Cooling only by a cool-down of ours, not one the endpoint asked for.
    fn cooling_softly(&self, now: Instant) -> bool {
        let state = self.health.lock();
        !state.cool_asked && state.cool_until.is_some_and(|until| until > now)
    }

    /// Cools the endpoint down; `asked` when the duration is its own `Retry-After`, which
    /// replaces a cool-down of ours even when shorter (the endpoint knows best), while ours
    /// never shortens one it asked for.
    fn cool_down(&self, for_how_long: Duration, asked: bool) {
        let until = Instant::now() + for_how_long.min(MAX_COOL_DOWN);
        let mut state = self.health.lock();
        let replaces_ours = asked && !state.cool_asked;
        if replaces_ours || state.cool_until.is_none_or(|known| until >= known) {
            state.cool_until = Some(until);
            state.cool_asked = asked;
        }
    }

    fn record(&self, result: &'static str) {
        metrics().rpc_attempt(&self.label, result);
    }
}

/// The endpoints of one chain for one role, in configured order.
#[derive(Debug, Clone)]
pub(crate) struct EndpointSet {
    pub chain: Chain,
    pub endpoints: Vec<Endpoint>,
}

impl EndpointSet {
    /// The chain's JSON-RPC endpoints: `rpc_url_<chain>` first, then `rpc_urls_<chain>`.
    /// Built once per distinct configuration: each paid call's work asks for them, and
    /// parsing and digesting each URL per call cost more than looking the set up.
    pub(crate) fn rpc(config: &Config, chain: Chain) -> Arc<EndpointSet> {
        let configured = config.rpc_endpoints(chain.caip2);
        memoized("rpc", chain, &configured, || {
            let endpoints = configured
                .iter()
                .enumerate()
                .map(|(i, (setting, url))| {
                    Endpoint::new(setting.clone(), format!("{}#{}", chain.caip2, i + 1), url)
                })
                .collect();
            EndpointSet { chain, endpoints }
        })
    }

    /// The chain's inventory provider (one URL; an RPC endpoint too, so it has a chain id).
    pub(crate) fn inventory(config: &Config, chain: Chain) -> Arc<EndpointSet> {
        let key = format!("inventory_url_{}", chain.caip2.replace(':', "_"));
        let configured: Vec<(String, &Secret)> = config
            .inventory_url(chain.caip2)
            .map(|url| (key, url))
            .into_iter()
            .collect();
        memoized("inventory", chain, &configured, || {
            let endpoints = configured
                .iter()
                .map(|(setting, url)| {
                    Endpoint::new(setting.clone(), format!("{}#inventory", chain.caip2), url)
                })
                .collect();
            EndpointSet { chain, endpoints }
        })
    }

    /// Whether no endpoint is configured.
    pub(crate) fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// Some endpoint has answered this chain's id.
    pub(crate) fn verified(&self) -> bool {
        self.endpoints
            .iter()
            .any(|e| e.identity() == Identity::Verified)
    }

    /// Why the set cannot be used: every endpoint answered another chain's id. Names the
    /// settings and the chains they answered, never a URL.
    pub(crate) fn mismatch(&self) -> Option<String> {
        let wrong: Vec<String> = self
            .endpoints
            .iter()
            .filter_map(|e| match e.identity() {
                Identity::Mismatch(id) => Some(format!(
                    "{} answers eth_chainId {id}{}, not {}",
                    e.setting,
                    networks::by_id(id).map_or(String::new(), |c| format!(" ({})", c.caip2)),
                    self.chain.caip2
                )),
                _ => None,
            })
            .collect();
        (!wrong.is_empty() && wrong.len() == self.endpoints.len()).then(|| wrong.join("; "))
    }

    /// Asks every endpoint for `eth_chainId` (one call each) and records the verdicts; a
    /// mismatch is logged with the setting and the chain it answered. An endpoint that does
    /// not answer (a 429, a timeout) keeps its last verdict: a node found serving another
    /// chain is not used again because a later check could not reach it.
    pub(crate) async fn verify_identity(&self, gateway: &Gateway, timeout: Duration) {
        for endpoint in &self.endpoints {
            self.check_identity(gateway, endpoint, timeout).await;
        }
    }

    /// Asks one endpoint for `eth_chainId` and records the verdict (see
    /// [`EndpointSet::verify_identity`]).
    async fn check_identity(&self, gateway: &Gateway, endpoint: &Endpoint, timeout: Duration) {
        let identity = ask_chain_id(gateway, self.chain, endpoint, timeout).await;
        self.record_identity(endpoint, identity);
    }

    /// Records what `eth_chainId` said of `endpoint`; silence keeps a verdict already made.
    fn record_identity(&self, endpoint: &Endpoint, identity: Identity) {
        if let Identity::Mismatch(id) = identity {
            tracing::error!(
                setting = %endpoint.setting,
                endpoint = %endpoint.label,
                answered_chain_id = id,
                expected = self.chain.caip2,
                "an RPC endpoint serves another chain; it is not used"
            );
        }
        let mut health = endpoint.health.lock();
        let definite = matches!(health.identity, Identity::Verified | Identity::Mismatch(_));
        if identity == Identity::Unanswered {
            if definite {
                tracing::warn!(setting = %endpoint.setting, endpoint = %endpoint.label, kept = ?health.identity, "eth_chainId was not answered; the endpoint keeps its last verdict");
                return;
            }
            tracing::warn!(setting = %endpoint.setting, endpoint = %endpoint.label, "eth_chainId was not answered; the endpoint's chain is unverified");
        }
        health.identity = identity;
    }
}

async fn ask_chain_id(
    gateway: &Gateway,
    chain: Chain,
    endpoint: &Endpoint,
    timeout: Duration,
) -> Identity {
    let Some(url) = &endpoint.url else {
        return Identity::Unanswered;
    };
    let body =
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []});
    let answer = rpc::post_json(gateway, chain.rpc, url, timeout, &body).await;
    let id = answer.ok().and_then(|value| {
        value
            .get("result")
            .and_then(serde_json::Value::as_str)
            .and_then(|hex| u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok())
    });
    match id {
        Some(id) if id == chain.chain_id => Identity::Verified,
        Some(id) => Identity::Mismatch(id),
        None => Identity::Unanswered,
    }
}

/// Checks the chain of every configured RPC and inventory endpoint.
pub(crate) async fn verify_all(gateway: &Gateway, config: &Config, timeout: Duration) {
    for chain in networks::ALL {
        EndpointSet::rpc(config, chain)
            .verify_identity(gateway, timeout)
            .await;
        EndpointSet::inventory(config, chain)
            .verify_identity(gateway, timeout)
            .await;
    }
}

/// A JSON-RPC transport over an [`EndpointSet`]: one endpoint at a time, failing over.
#[derive(Debug, Clone)]
pub(crate) struct FailoverRpc {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    gateway: Gateway,
    /// Reads go only to endpoints that answered our chain's id (the payment verdicts' reader).
    verified_only: bool,
    upstream: Upstream,
    set: Arc<EndpointSet>,
    response_timeout: Duration,
    /// The endpoint that answered last (usize::MAX: none yet).
    sticky: AtomicUsize,
    /// Retries this transport needed, in words, for a response's limitations.
    retries: Mutex<Vec<String>>,
}

/// How one attempt went, for the failover decision.
enum Outcome {
    Answered(ResponsePacket),
    Lagging(ResponsePacket),
    Failed(TransportError, Option<Duration>, &'static str),
    /// The endpoint refused a log search's range as too large (HTTP 413).
    TooLarge(TransportError),
    /// No answer before the call's work budget ran out: the cut is ours, not the endpoint's,
    /// so it is not cooled down for it.
    Cut,
}

/// How often, at most, a read asks `eth_chainId` of an endpoint that stays silent to it.
const IDENTITY_RECHECK: Duration = Duration::from_secs(30);

/// Most retry notes a transport keeps. A call's transport needs a few for its answer's
/// `limitations`; the settlement's chain reader lives as long as the process and nobody reads
/// its notes, so without a bound they would grow with every retry it ever made.
const MAX_RETRY_NOTES: usize = 16;

impl FailoverRpc {
    /// A transport over `set`; each attempt's answer is bounded by `response_timeout`.
    pub(crate) fn new(gateway: Gateway, set: Arc<EndpointSet>, response_timeout: Duration) -> Self {
        Self::build(gateway, set, response_timeout, false)
    }

    /// As [`FailoverRpc::new`], reading only endpoints that have answered our chain's id: one
    /// still silent after it was asked is passed over, and with none left the read fails.
    /// For the payment verdicts, where an unknown chain's "unused" would read as unpaid and
    /// a failed read only leaves the outcome pending.
    pub(crate) fn verified_only(
        gateway: Gateway,
        set: Arc<EndpointSet>,
        response_timeout: Duration,
    ) -> Self {
        Self::build(gateway, set, response_timeout, true)
    }

    fn build(
        gateway: Gateway,
        set: Arc<EndpointSet>,
        response_timeout: Duration,
        verified_only: bool,
    ) -> Self {
        FailoverRpc {
            inner: Arc::new(Inner {
                upstream: set.chain.rpc,
                verified_only,
                gateway,
                set,
                response_timeout,
                sticky: AtomicUsize::new(usize::MAX),
                retries: Mutex::default(),
            }),
        }
    }

    /// The chain's endpoints from the configuration; None when none is configured.
    pub(crate) fn for_chain(
        gateway: &Gateway,
        config: &Config,
        chain: Chain,
        response_timeout: Duration,
    ) -> Option<FailoverRpc> {
        let set = EndpointSet::rpc(config, chain);
        (!set.is_empty()).then(|| FailoverRpc::new(gateway.clone(), set, response_timeout))
    }

    /// An alloy provider speaking through this transport (clones share stickiness and notes).
    pub(crate) fn provider(&self) -> RootProvider<Ethereum> {
        RootProvider::new(RpcClient::new(self.clone(), false))
    }

    /// The endpoints, for identity verdicts.
    pub(crate) fn endpoints(&self) -> &EndpointSet {
        &self.inner.set
    }

    /// What a response may say of the endpoint that answered this transport's last read;
    /// None before any answered.
    pub(crate) fn answered_by(&self) -> Option<rpc::PublicEndpoint> {
        let index = self.inner.sticky.load(Ordering::Relaxed);
        let endpoint = self.inner.set.endpoints.get(index)?;
        endpoint.url.as_ref().map(rpc::public_endpoint_of)
    }

    /// The retries reads through this transport needed, in words (empty: none).
    pub(crate) fn retries(&self) -> Vec<String> {
        self.inner
            .retries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Keeps `text` among the first [`MAX_RETRY_NOTES`] notes; later ones are dropped.
    fn note(&self, text: String) {
        let mut notes = self
            .inner
            .retries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if notes.len() < MAX_RETRY_NOTES {
            notes.push(text);
        }
    }

    /// The endpoints to try, in order: the sticky one first, then configured order; those
    /// cooling down or serving another chain are left out. When that leaves none, the ones
    /// cooling by our own choice (an error, a timeout) are tried after all: a lone endpoint
    /// with a blip is not lost; a `Retry-After` is always honoured.
    fn candidates(&self) -> Vec<usize> {
        let now = Instant::now();
        let endpoints = &self.inner.set.endpoints;
        let right_chain = |i: &usize| !matches!(endpoints[*i].identity(), Identity::Mismatch(_));
        let sticky = self.inner.sticky.load(Ordering::Relaxed);
        let mut order: Vec<usize> = (0..endpoints.len())
            .filter(right_chain)
            .filter(|i| !endpoints[*i].cooling(now))
            .collect();
        if order.is_empty() {
            order = (0..endpoints.len())
                .filter(right_chain)
                .filter(|i| endpoints[*i].cooling_softly(now))
                .collect();
        }
        if let Some(at) = order.iter().position(|i| *i == sticky) {
            order.remove(at);
            order.insert(0, sticky);
        }
        order
    }

    async fn attempt(&self, index: usize, packet: &RequestPacket) -> Outcome {
        let endpoint = &self.inner.set.endpoints[index];
        match endpoint.identity() {
            Identity::Verified => self.attempt_as(endpoint, packet, None).await,
            // Found out by another read since this one chose it.
            Identity::Mismatch(_) => another_chain(),
            Identity::Unchecked | Identity::Unanswered => {
                Box::pin(self.attempt_proving(endpoint, packet)).await
            }
        }
    }

    /// An attempt on an endpoint whose chain is unconfirmed: the read goes with `eth_chainId`
    /// in one batch (`chain_proof`), and its answer counts only once the chain id is ours.
    async fn attempt_proving(&self, endpoint: &Endpoint, packet: &RequestPacket) -> Outcome {
        let Ok(batch) = chain_proof::with_chain_id(packet) else {
            endpoint.record("unproven");
            return unproven("the read could not be batched with eth_chainId");
        };
        let answer = match self.attempt_as(endpoint, &batch, Some(packet)).await {
            Outcome::Answered(answer) | Outcome::Lagging(answer) => answer,
            other => return other,
        };
        let chain = self.inner.set.chain;
        let (chain_id, read) = chain_proof::split(answer, packet);
        match chain_id {
            Some(id) if id == chain.chain_id => {
                self.inner.set.record_identity(endpoint, Identity::Verified);
            }
            Some(id) => self
                .inner
                .set
                .record_identity(endpoint, Identity::Mismatch(id)),
            // Silence changes no verdict; another read may have made one meanwhile.
            None => {}
        }
        let (outcome, result) = match (endpoint.identity(), read) {
            (Identity::Verified, Some(read)) if lagging(&read) => {
                (Outcome::Lagging(read), "lagging")
            }
            (Identity::Verified, Some(read)) => (Outcome::Answered(read), "ok"),
            (Identity::Verified, None) => {
                let error = TransportErrorKind::custom_str("the batch's answer lacked the read's");
                (Outcome::Failed(error, None, "no usable answer"), "error")
            }
            (Identity::Mismatch(_), _) => (another_chain(), "wrong_chain"),
            _ => (
                unproven("the endpoint did not name its chain beside the read"),
                "unproven",
            ),
        };
        endpoint.record(result);
        outcome
    }

    /// One attempt sending `sent`: the read, or (`proving`, the read alone) the read with its
    /// chain proof, whose answer [`FailoverRpc::attempt_proving`] records.
    async fn attempt_as(
        &self,
        endpoint: &Endpoint,
        sent: &RequestPacket,
        proving: Option<&RequestPacket>,
    ) -> Outcome {
        let read = proving.unwrap_or(sent);
        let Some(url) = &endpoint.url else {
            endpoint.record("error");
            return Outcome::Failed(
                TransportErrorKind::custom_str("the configured RPC URL is invalid"),
                None,
                "invalid URL",
            );
        };
        let inner = &self.inner;
        let left = inner.gateway.time_left();
        let timeout = left.map_or(inner.response_timeout, |left| {
            left.min(inner.response_timeout)
        });
        match rpc::post_packet(&inner.gateway, inner.upstream, url, timeout, sent).await {
            Ok(answer) if proving.is_some() => Outcome::Answered(answer),
            Ok(answer) if lagging(&answer) => {
                endpoint.record("lagging");
                Outcome::Lagging(answer)
            }
            Ok(answer) => {
                endpoint.record("ok");
                Outcome::Answered(answer)
            }
            Err(Attempt {
                error,
                retry_after,
                rate_limited,
            }) => {
                if !rate_limited && self.out_of_time() {
                    endpoint.record("cut");
                    return Outcome::Cut;
                }
                if range_too_large(&error, read) {
                    endpoint.record("too_large");
                    return Outcome::TooLarge(error);
                }
                let (result, why) = if rate_limited {
                    ("rate_limited", "HTTP 429")
                } else {
                    ("error", "no usable answer")
                };
                endpoint.record(result);
                Outcome::Failed(error, retry_after, why)
            }
        }
    }

    /// The call's work budget (the gateway's deadline) has run out: no further attempt.
    fn out_of_time(&self) -> bool {
        self.inner
            .gateway
            .time_left()
            .is_some_and(|left| left.is_zero())
    }

    /// Whether the budget leaves room for a lagging node's retry after its delay, with time
    /// for an answer.
    fn time_for_lag_retry(&self) -> bool {
        self.inner
            .gateway
            .time_left()
            .is_none_or(|left| left > LAG_RETRY_DELAY + MIN_ATTEMPT_TIME)
    }

    /// The next endpoint of `order` that is not known to serve another chain. One whose chain
    /// is unconfirmed (never asked, as when configured after start-up's check, or silent
    /// when last asked) is asked `eth_chainId` first: a wrong URL must not answer a paid
    /// read with another chain's state because start-up's check met a 429.
    async fn next_on_our_chain(&self, order: &mut impl Iterator<Item = usize>) -> Option<usize> {
        let set = &self.inner.set;
        for index in order.by_ref() {
            let endpoint = &set.endpoints[index];
            if endpoint.claim_chain_check(Instant::now()) {
                set.check_identity(&self.inner.gateway, endpoint, self.inner.response_timeout)
                    .await;
            }
            let usable = match endpoint.identity() {
                Identity::Verified => true,
                Identity::Mismatch(_) => false,
                Identity::Unchecked | Identity::Unanswered => !self.inner.verified_only,
            };
            if usable {
                return Some(index);
            }
        }
        None
    }

    async fn send(self, packet: RequestPacket) -> Result<ResponsePacket, TransportError> {
        if self.out_of_time() {
            return Err(out_of_time());
        }
        let mut order = self.candidates().into_iter();
        let Some(mut index) = self.next_on_our_chain(&mut order).await else {
            return Err(TransportErrorKind::custom_str(&format!(
                "no {} RPC endpoint is usable now (each is cooling down after a failure, serves another chain{})",
                self.inner.set.chain.caip2,
                if self.inner.verified_only {
                    ", or has not answered its chain id"
                } else {
                    ""
                }
            )));
        };
        let mut attempts = 1;
        loop {
            let label = self.inner.set.endpoints[index].label.clone();
            match self.attempt(index, &packet).await {
                Outcome::Answered(answer) => {
                    self.inner.sticky.store(index, Ordering::Relaxed);
                    return Ok(answer);
                }
                Outcome::Lagging(answer) => {
                    if attempts >= MAX_ATTEMPTS {
                        // Behind on its retry too: for a moment the next endpoint serves
                        // the reads (the cap leaves this read no third attempt).
                        self.inner.set.endpoints[index].cool_down(LAG_COOL_DOWN, false);
                        self.note(format!(
                            "{label} still did not know the requested block when asked again; it is passed over for {} ms and the next reads go to the next endpoint.",
                            LAG_COOL_DOWN.as_millis()
                        ));
                        return Ok(answer);
                    }
                    if !self.time_for_lag_retry() {
                        self.note(format!(
                            "{label} did not know the requested block yet (a lagging node); the machine's overall_timeout_ms left no time to ask again."
                        ));
                        return Ok(answer);
                    }
                    self.note(format!(
                        "{label} did not know the requested block yet (a lagging node); the read was asked again after {} ms.",
                        LAG_RETRY_DELAY.as_millis()
                    ));
                    tokio::time::sleep(LAG_RETRY_DELAY).await;
                }
                Outcome::Cut => return Err(out_of_time()),
                Outcome::TooLarge(error) => return Err(error),
                Outcome::Failed(error, retry_after, why) => {
                    let endpoint = &self.inner.set.endpoints[index];
                    endpoint.cool_down(
                        retry_after.unwrap_or(DEFAULT_COOL_DOWN),
                        retry_after.is_some(),
                    );
                    let more = attempts < MAX_ATTEMPTS && !self.out_of_time();
                    let next = if more {
                        self.next_on_our_chain(&mut order).await
                    } else {
                        None
                    };
                    let Some(next) = next else {
                        return Err(error);
                    };
                    self.note(format!(
                        "{label} failed ({why}); the read was retried on {}.",
                        self.inner.set.endpoints[next].label
                    ));
                    index = next;
                }
            }
            attempts += 1;
        }
    }
}

/// An attempt refused because the endpoint serves another chain.
fn another_chain() -> Outcome {
    let error = TransportErrorKind::custom_str("the endpoint serves another chain");
    Outcome::Failed(error, None, "another chain")
}

/// An attempt whose answer cannot be used: the endpoint's chain is still unproven.
fn unproven(why: &str) -> Outcome {
    let error = TransportErrorKind::custom_str(&format!("{why} (eth_chainId in a batch)"));
    Outcome::Failed(error, None, "chain unproven")
}

/// Why a read ended unanswered when the call's work budget ran out.
fn out_of_time() -> TransportError {
    TransportErrorKind::custom_str("no answer before the machine's overall_timeout_ms ran out")
}

/// A refusal of a packet of log searches only: an HTTP 413 (QuickNode), or an HTTP 400 whose
/// body is a JSON-RPC error that may be about the range (Alchemy: `-32600` "You can make
/// eth_getLogs requests with up to a 500 block range"; see [`rpc::may_be_range_refusal`]).
/// The endpoint refused their range, which a narrower search fixes. The same statuses to
/// other reads, or a 400 naming another cause (a rate limit, a credential), may be a body
/// limit or a broken node, so those fail over.
fn range_too_large(error: &TransportError, packet: &RequestPacket) -> bool {
    rpc::refuses_range(error) && packet.method_names().all(|method| method == "eth_getLogs")
}

/// The node answered that it does not know the block (the providers' spellings vary).
fn lagging(answer: &ResponsePacket) -> bool {
    const SIGNS: [&str; 4] = [
        "header not found",
        "unknown block",
        "block not found",
        "no state available for block",
    ];
    answer.responses().iter().any(|response| {
        response.payload.as_error().is_some_and(|error| {
            let message = error.message.to_ascii_lowercase();
            SIGNS.iter().any(|sign| message.contains(sign))
        })
    })
}

impl tower::Service<RequestPacket> for FailoverRpc {
    type Response = ResponsePacket;
    type Error = TransportError;
    type Future = TransportFut<'static>;

    fn poll_ready(&mut self, _cx: &mut task::Context<'_>) -> task::Poll<Result<(), Self::Error>> {
        task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, packet: RequestPacket) -> Self::Future {
        Box::pin(self.clone().send(packet))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::providers::Provider;
    use alloy::rpc::json_rpc::{ErrorPayload, Id, Response, ResponsePayload};

    fn failure(message: &str) -> ResponsePacket {
        ResponsePacket::Single(Response {
            id: Id::Number(1),
            payload: ResponsePayload::Failure(ErrorPayload {
                code: -32000,
                message: message.to_string().into(),
                data: None,
            }),
        })
    }

    #[test]
    fn lagging_nodes_are_told_apart_from_other_errors() {
        assert!(lagging(&failure("header not found")));
        assert!(lagging(&failure("Unknown block")));
        assert!(!lagging(&failure("execution reverted")));
    }

    /// A Base node on loopback (see [`node_on`]): it answers `eth_chainId` 8453 itself.
    async fn node(answer: fn(usize) -> (u16, serde_json::Value)) -> (String, Arc<AtomicUsize>) {
        node_on(Some(8453), answer).await
    }

    /// A JSON-RPC node on loopback: `answer(n)` is the HTTP status and the `result` or
    /// `error` member of its nth answer (the node adds `jsonrpc` and the request's `id`).
    /// Counts the requests it was asked, except `eth_chainId` when `chain_id` answers it.
    async fn node_on(
        chain_id: Option<u64>,
        answer: fn(usize) -> (u16, serde_json::Value),
    ) -> (String, Arc<AtomicUsize>) {
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&asked);
        let url = serve_json(move |request| {
            let (status, mut body) = match chain_id {
                Some(id) if request["method"] == "eth_chainId" => {
                    (200, serde_json::json!({"result": format!("{id:#x}")}))
                }
                _ => answer(counter.fetch_add(1, Ordering::SeqCst)),
            };
            body["jsonrpc"] = "2.0".into();
            body["id"] = request["id"].clone();
            (status, body)
        })
        .await;
        (url, asked)
    }

    /// A server on loopback answering each POSTed JSON body with `answer(body)`: the HTTP
    /// status and the JSON it sends back. Its URL.
    async fn serve_json<F>(answer: F) -> String
    where
        F: Fn(serde_json::Value) -> (u16, serde_json::Value) + Clone + Send + Sync + 'static,
    {
        use warp::Filter;
        let route = warp::post()
            .and(warp::body::json())
            .map(move |request: serde_json::Value| {
                let (status, body) = answer(request);
                warp::http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .expect("response")
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(warp::serve(route).incoming(listener).run());
        format!("http://{addr}")
    }

    /// An Ethereum endpoint of setting `rpc_url_eip155_1`, labelled `eip155:1#test-{name}`.
    fn mainnet_endpoint(name: &str, url: &str) -> Endpoint {
        let url = crate::config::Secret::for_tests(url);
        Endpoint::new(
            "rpc_url_eip155_1".into(),
            format!("eip155:1#test-{name}"),
            &url,
        )
    }

    /// A provider failing over across Base's endpoints at these URLs (see [`base_endpoints`]).
    fn failover_provider(name: &str, urls: &[&str]) -> RootProvider<Ethereum> {
        let set = Arc::new(base_endpoints(name, urls));
        let gateway = Gateway::new().expect("gateway");
        FailoverRpc::new(gateway, set, Duration::from_secs(2)).provider()
    }

    /// Base's endpoints at these URLs, labelled `eip155:8453#test-{name}-{n}`.
    fn base_endpoints(name: &str, urls: &[&str]) -> EndpointSet {
        let endpoints = urls.iter().enumerate().map(|(n, url)| {
            let url = crate::config::Secret::for_tests(url);
            let label = format!("eip155:8453#test-{name}-{n}");
            Endpoint::new("rpc_url_eip155_8453".into(), label, &url)
        });
        EndpointSet {
            chain: networks::BASE,
            endpoints: endpoints.collect(),
        }
    }

    /// The settlement's chain reader lives as long as the process: its retry notes, which
    /// nobody reads, stay bounded however many retries it makes.
    #[tokio::test]
    async fn a_transport_keeps_a_bounded_number_of_retry_notes() {
        let set = Arc::new(base_endpoints("notes", &["http://127.0.0.1:9"]));
        let rpc = FailoverRpc::new(
            Gateway::new().expect("gateway"),
            set,
            Duration::from_secs(2),
        );
        for n in 0..1000 {
            rpc.note(format!("retry {n}"));
        }
        let notes = rpc.retries();
        assert_eq!(notes.len(), MAX_RETRY_NOTES);
        assert_eq!(notes[0], "retry 0", "the first ones are kept");
    }

    /// An endpoint whose chain start-up's check could not confirm (a 429) is asked
    /// `eth_chainId` before its first read: a URL of another chain is passed over, never read.
    #[tokio::test]
    async fn an_endpoint_of_unconfirmed_chain_is_asked_before_it_is_read() {
        let (mainnet, mainnet_asked) =
            node_on(Some(1), |_| (200, serde_json::json!({"result": "0x1"}))).await;
        let (base, base_asked) = node(|_| (200, serde_json::json!({"result": "0x2b"}))).await;
        let set = Arc::new(base_endpoints("unconfirmed", &[&mainnet, &base]));
        for endpoint in &set.endpoints {
            endpoint.health.lock().identity = Identity::Unanswered;
        }
        let gateway = Gateway::new().expect("gateway");
        let provider = FailoverRpc::new(gateway, set.clone(), Duration::from_secs(2)).provider();
        let answered = provider.get_block_number().await;
        assert_eq!(answered.expect("answered"), 0x2b, "Base's node answered");
        assert_eq!(mainnet_asked.load(Ordering::SeqCst), 0, "never read");
        assert_eq!(base_asked.load(Ordering::SeqCst), 1);
        assert_eq!(set.endpoints[0].identity(), Identity::Mismatch(1));
        assert_eq!(set.endpoints[1].identity(), Identity::Verified);
    }

    /// A node of chain `chain_id` that answers 429 to its first `limited` requests, then
    /// every request, single or batched: `eth_chainId` with its chain, anything else 0x2a.
    async fn rate_limited_node(chain_id: u64, limited: usize) -> String {
        let asked = Arc::new(AtomicUsize::new(0));
        let one = move |request: &serde_json::Value| {
            let result = match request["method"].as_str() {
                Some("eth_chainId") => format!("{chain_id:#x}"),
                _ => "0x2a".into(),
            };
            serde_json::json!({"jsonrpc": "2.0", "id": request["id"], "result": result})
        };
        serve_json(move |request| {
            if asked.fetch_add(1, Ordering::SeqCst) < limited {
                let limited =
                    serde_json::json!({"error": {"code": 429, "message": "rate limited"}});
                (429, limited)
            } else if let Some(batch) = request.as_array() {
                (200, batch.iter().map(one).collect())
            } else {
                (200, one(&request))
            }
        })
        .await
    }

    /// An endpoint whose `eth_chainId` met a 429 (start-up's check, then the read's own) is
    /// read with `eth_chainId` in the same batch: a URL of another chain is found out and
    /// its answer dropped, the read going to the next endpoint; a lone endpoint of our chain
    /// still answers, now verified.
    #[tokio::test]
    async fn a_read_of_an_endpoint_silent_about_its_chain_names_the_chain_too() {
        let mainnet = rate_limited_node(1, 1).await;
        let (base, _) = node(|_| (200, serde_json::json!({"result": "0x2b"}))).await;
        let set = Arc::new(base_endpoints("proving", &[&mainnet, &base]));
        set.endpoints[0].health.lock().identity = Identity::Unanswered;
        let gateway = Gateway::new().expect("gateway");
        let rpc = FailoverRpc::new(gateway.clone(), set.clone(), Duration::from_secs(2));
        let answered = rpc.provider().get_block_number().await;
        assert_eq!(answered.expect("answered"), 0x2b, "not mainnet's 0x2a");
        assert_eq!(set.endpoints[0].identity(), Identity::Mismatch(1));

        let lone = rate_limited_node(8453, 1).await;
        let set = Arc::new(base_endpoints("proving-alone", &[&lone]));
        set.endpoints[0].health.lock().identity = Identity::Unanswered;
        let rpc = FailoverRpc::new(gateway, set.clone(), Duration::from_secs(2));
        let answered = rpc.provider().get_block_number().await;
        assert_eq!(answered.expect("answered"), 0x2a);
        assert_eq!(set.endpoints[0].identity(), Identity::Verified);
    }

    /// The payment verdicts' reader passes over an endpoint that stays silent to
    /// `eth_chainId` (a 429 to everything): the read goes to the next, and with no other it
    /// fails. A machine's reader still reads it, as before.
    #[tokio::test]
    async fn a_verified_only_reader_never_reads_an_endpoint_silent_about_its_chain() {
        let silent = || {
            node_on(None, |_| {
                let limited =
                    serde_json::json!({"error": {"code": 429, "message": "rate limited"}});
                (429, limited)
            })
        };
        let (quiet, quiet_asked) = silent().await;
        let (base, base_asked) = node(|_| (200, serde_json::json!({"result": "0x2b"}))).await;
        let set = Arc::new(base_endpoints("silent", &[&quiet, &base]));
        let gateway = Gateway::new().expect("gateway");
        let strict = FailoverRpc::verified_only(gateway.clone(), set, Duration::from_secs(2));
        let answered = strict.provider().get_block_number().await;
        assert_eq!(answered.expect("answered"), 0x2b, "the next endpoint read");
        assert_eq!(
            quiet_asked.load(Ordering::SeqCst),
            1,
            "only its chain id asked"
        );
        assert_eq!(base_asked.load(Ordering::SeqCst), 1);

        let (alone, alone_asked) = silent().await;
        let set = Arc::new(base_endpoints("silent-alone", &[&alone]));
        let strict =
            FailoverRpc::verified_only(gateway.clone(), set.clone(), Duration::from_secs(2));
        let refused = strict.provider().get_block_number().await;
        assert!(refused.is_err(), "{refused:?}");
        assert_eq!(
            alone_asked.load(Ordering::SeqCst),
            1,
            "only its chain id asked"
        );
        let lenient = FailoverRpc::new(gateway, set, Duration::from_secs(2));
        let read = lenient.provider().get_block_number().await;
        assert!(read.is_err(), "429 to the read too: {read:?}");
        assert_eq!(
            alone_asked.load(Ordering::SeqCst),
            2,
            "a machine's reader reads it"
        );
    }

    /// A node found serving another chain stays unused when a later check cannot reach it
    /// (a 429): only a new `eth_chainId` answer changes a verdict.
    #[tokio::test]
    async fn an_unanswered_recheck_keeps_an_endpoints_last_verdict() {
        let (url, asked) = node_on(None, |n| match n {
            0 => (200, serde_json::json!({"result": "0x1"})),
            _ => (
                429,
                serde_json::json!({"error": {"code": 429, "message": "rate limited"}}),
            ),
        })
        .await;
        let set = base_endpoints("recheck", &[&url]);
        let gateway = Gateway::new().expect("gateway");
        set.verify_identity(&gateway, Duration::from_secs(2)).await;
        assert!(set.mismatch().is_some(), "it answered eip155:1");
        set.verify_identity(&gateway, Duration::from_secs(2)).await;
        assert_eq!(asked.load(Ordering::SeqCst), 2, "asked again, answered 429");
        assert_eq!(set.endpoints[0].identity(), Identity::Mismatch(1));
        assert!(set.mismatch().is_some(), "still the wrong chain");
    }

    /// A range refusal goes back to the reader, which narrows its request: the read is not
    /// failed over and the endpoint is not cooled down, so the next read is its again. Both
    /// providers' refusals: QuickNode's HTTP 413 and Alchemy's HTTP 400 with a JSON-RPC error.
    #[tokio::test]
    async fn a_request_refused_as_too_large_is_neither_failed_over_nor_cooled() {
        fn quicknode(n: usize) -> (u16, serde_json::Value) {
            match n {
                0 => (
                    413,
                    serde_json::json!({"error": {"code": -32614, "message": "eth_getLogs is limited to a 10,000 range"}}),
                ),
                _ => (200, serde_json::json!({"result": "0x2a"})),
            }
        }
        fn alchemy(n: usize) -> (u16, serde_json::Value) {
            match n {
                0 => (
                    400,
                    serde_json::json!({"error": {"code": -32600, "message": "You can make eth_getLogs requests with up to a 500 block range. Based on your parameters, this block range should work: [0x0, 0x1f3]"}}),
                ),
                _ => (200, serde_json::json!({"result": "0x2a"})),
            }
        }
        for (name, refusal) in [
            ("quicknode", quicknode as fn(usize) -> _),
            ("alchemy", alchemy),
        ] {
            let (first, first_asked) = node(refusal).await;
            let (second, second_asked) =
                node(|_| (200, serde_json::json!({"result": "0x2b"}))).await;
            let provider = failover_provider(name, &[&first, &second]);
            let filter = alloy::rpc::types::Filter::new()
                .from_block(0)
                .to_block(99_999);
            let refused = provider.get_logs(&filter).await;
            assert!(
                refused.is_err(),
                "{name}: the refusal reached the search: {refused:?}"
            );
            assert_eq!(
                second_asked.load(Ordering::SeqCst),
                0,
                "{name}: not failed over"
            );
            let answered = provider.get_block_number().await;
            assert_eq!(
                answered.expect("answered"),
                0x2a,
                "{name}: the first endpoint again"
            );
            assert_eq!(first_asked.load(Ordering::SeqCst), 2, "{name}");
            assert_eq!(second_asked.load(Ordering::SeqCst), 0, "{name}");
        }
    }

    /// A 400's body is kept cut to 512 bytes: a JSON-RPC error that long still reads as one,
    /// and a proxy's HTML page does not.
    #[test]
    fn a_cut_json_rpc_error_still_reads_as_one() {
        let long = serde_json::json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32600,
            "message": "You can make eth_getLogs requests with up to a 500 block range.",
            "data": "x".repeat(1000)}})
        .to_string();
        assert!(rpc::is_json_rpc_error(&long[..512]));
        assert!(rpc::is_json_rpc_error(&long));
        assert!(!rpc::is_json_rpc_error(
            "<html><body>400 Bad Request</body></html>"
        ));
        assert!(!rpc::is_json_rpc_error(
            r#"{"jsonrpc":"2.0","id":1,"result":[]}"#
        ));
    }

    /// A 413 or a 400 to any other read is an endpoint failure: cooled, and the read fails
    /// over.
    #[tokio::test]
    async fn a_413_or_400_to_another_read_fails_over() {
        fn body_limit(_: usize) -> (u16, serde_json::Value) {
            let error = serde_json::json!({"code": -32600, "message": "request body too large"});
            (413, serde_json::json!({ "error": error }))
        }
        fn bad_request(_: usize) -> (u16, serde_json::Value) {
            let error = serde_json::json!({"code": -32600, "message": "invalid request"});
            (400, serde_json::json!({ "error": error }))
        }
        for (name, refusal) in [
            ("body-limit", body_limit as fn(usize) -> _),
            ("bad-request", bad_request),
        ] {
            let (first, _) = node(refusal).await;
            let (second, second_asked) =
                node(|_| (200, serde_json::json!({"result": "0x2b"}))).await;
            let provider = failover_provider(name, &[&first, &second]);
            let answered = provider.get_block_number().await;
            assert_eq!(answered.expect("failed over"), 0x2b, "{name}");
            assert_eq!(second_asked.load(Ordering::SeqCst), 1, "{name}");
        }
    }

    #[test]
    fn an_endpoints_debug_never_shows_its_url() {
        let endpoint = mainnet_endpoint("debug", "https://rpc.example/v2/SECRET-key");
        let shown = format!("{endpoint:?}");
        assert!(shown.contains("eip155:1#test-debug"), "{shown}");
        assert!(
            !shown.contains("SECRET") && !shown.contains("rpc.example"),
            "{shown}"
        );
    }

    #[test]
    fn cool_downs_are_capped_and_never_shortened() {
        let endpoint = mainnet_endpoint("cool", "http://127.0.0.1:9/cool");
        endpoint.cool_down(Duration::from_secs(3600), true);
        endpoint.cool_down(Duration::from_secs(1), false);
        assert!(
            !endpoint.cooling_softly(Instant::now()),
            "a Retry-After stays honoured"
        );
        let until = endpoint.health.lock().cool_until.expect("cooling");
        let left = until - Instant::now();
        assert!(left > Duration::from_secs(290) && left <= MAX_COOL_DOWN);
    }
}
