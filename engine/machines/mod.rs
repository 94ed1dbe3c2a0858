//! The machines: one [`Machine`] implementation per observation, and the static
//! [`REGISTRY`] the HTTP edge looks them up in. Each machine declares its typed request
//! (deserialized once, after schema validation), its pre-payment checks on that request (no
//! I/O), its readiness on this deployment, and its paid `observe`.
//!
//! Nothing here knows HTTP: a refused request is a [`CheckFailure`], a machine that cannot run
//! here is [`NotReady`], and a failure of ours while working is a [`WorkError`]; the edge maps
//! them to status codes and error bodies.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize as _;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::catalog::manifest::Machine as Spec;
use crate::chain::endpoints::EndpointSet;
use crate::chain::networks;
use crate::config::{Config, Secret};
use crate::net::gateway::Gateway;
use crate::support::json_doc::Doc;
use crate::support::ttl_cache::TtlCache;

pub(crate) mod checks;
pub(crate) mod listing;
pub(crate) mod probe_reads;
pub mod vm01;
pub(crate) mod vm02;
pub(crate) mod vm03;
pub(crate) mod vm04;
pub(crate) mod vm05;
pub(crate) mod vm06;
pub(crate) mod vm07;
pub(crate) mod vm08;
pub(crate) mod vm09;
pub(crate) mod vm10;
pub(crate) mod vm11;

/// One machine of the catalog.
pub trait Machine: Send + Sync + 'static {
    /// The manifest id, e.g. `VM01`.
    const ID: &'static str;
    /// The request body, deserialized once after the manifest's input schema accepted it.
    type Request: DeserializeOwned + Send + Sync + 'static;
    /// The answer's body: a typed struct, or a `Value` built field by field. It is serialized
    /// once, when the work ends.
    type Answer: Serialize + Send;

    /// What the paid work reads, in the order readiness asks for it.
    const NEEDS: &'static [Need];

    /// Pre-payment semantic checks on the typed request; no I/O.
    fn check(spec: &Spec, request: &Self::Request) -> Result<(), CheckFailure>;

    /// Whether this deployment can take paid calls for the machine: the first of
    /// [`Machine::NEEDS`] it lacks refuses.
    fn readiness(spec: &Spec, config: &Config) -> Result<(), NotReady> {
        Self::NEEDS
            .iter()
            .try_for_each(|need| need.ready(spec, config))
    }

    /// The paid work. Upstream failures are truthful HOLD/PARTIAL results, not errors.
    fn observe(
        call: Call<'_, Self::Request>,
    ) -> impl Future<Output = Result<Self::Answer, WorkError>> + Send;
}

/// One paid call as a machine's `observe` receives it.
pub struct Call<'a, R> {
    /// The server's context: gateway, configuration, cache.
    pub context: &'a WorkContext,
    /// The machine's manifest entry.
    pub spec: &'static Spec,
    /// The typed request the pre-payment checks accepted.
    pub request: &'a R,
}

impl<'a, R> Call<'a, R> {
    /// The context, the manifest entry and the request, in that order.
    pub fn parts(self) -> (&'a WorkContext, &'static Spec, &'a R) {
        (self.context, self.spec, self.request)
    }
}

/// A machine as the registry holds it: the typed request erased behind [`Work`].
pub trait Entry: Sync {
    /// The manifest id.
    fn id(&self) -> &'static str;
    /// See [`Machine::NEEDS`].
    fn needs(&self) -> &'static [Need];
    /// See [`Machine::readiness`].
    fn readiness(&self, spec: &Spec, config: &Config) -> Result<(), NotReady>;
    /// The endpoint sets of the machine's RPC and inventory needs, built once, so each request
    /// checks their chains as they stand now without rebuilding them.
    fn chain_checks(&self, config: &Config) -> ChainChecks;
    /// Reads a schema-valid request into the machine's typed request, runs the pre-payment
    /// checks, and returns the paid work, not yet started.
    fn accept(&self, spec: &'static Spec, request: &Doc<'_>) -> Result<Work, CheckFailure>;
}

struct Registered<M>(PhantomData<fn() -> M>);

impl<M: Machine> Entry for Registered<M> {
    fn id(&self) -> &'static str {
        M::ID
    }

    fn needs(&self) -> &'static [Need] {
        M::NEEDS
    }

    fn readiness(&self, spec: &Spec, config: &Config) -> Result<(), NotReady> {
        M::readiness(spec, config)
    }

    fn chain_checks(&self, config: &Config) -> ChainChecks {
        ChainChecks::of(M::NEEDS, config)
    }

    fn accept(&self, spec: &'static Spec, request: &Doc<'_>) -> Result<Work, CheckFailure> {
        let request = M::Request::deserialize(request).map_err(|e| {
            CheckFailure::new(
                "invalid_body",
                format!("the request could not be read: {e}"),
            )
        })?;
        M::check(spec, &request)?;
        Ok(Work(Box::new(Accepted::<M> { spec, request })))
    }
}

/// Every machine, in catalog order.
pub static REGISTRY: [&dyn Entry; 11] = [
    &Registered::<vm01::Vm01>(PhantomData),
    &Registered::<vm02::Vm02>(PhantomData),
    &Registered::<vm03::Vm03>(PhantomData),
    &Registered::<vm04::Vm04>(PhantomData),
    &Registered::<vm05::Vm05>(PhantomData),
    &Registered::<vm06::Vm06>(PhantomData),
    &Registered::<vm07::Vm07>(PhantomData),
    &Registered::<vm08::Vm08>(PhantomData),
    &Registered::<vm09::Vm09>(PhantomData),
    &Registered::<vm10::Vm10>(PhantomData),
    &Registered::<vm11::Vm11>(PhantomData),
];

/// The registered machine of a manifest id.
pub fn find(id: &str) -> Option<&'static dyn Entry> {
    REGISTRY.iter().copied().find(|entry| entry.id() == id)
}

/// The first buffer an answer is serialized into: VM02's answer is about 1 KB; a larger one
/// grows it.
const ANSWER_BUFFER_BYTES: usize = 4096;

/// The future of a machine's paid work: the answer's body as JSON bytes.
pub type Observation<'a> = Pin<Box<dyn Future<Output = Result<Vec<u8>, WorkError>> + Send + 'a>>;

/// An accepted request's paid work, handed to the payment gate as a value. Nothing runs until
/// [`Work::observe`]'s future is polled.
pub struct Work(Box<dyn PaidWork>);

impl Work {
    /// Starts the work with the server's context.
    pub fn observe(self, context: &WorkContext) -> Observation<'_> {
        self.0.observe(context)
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Work")
    }
}

trait PaidWork: Send {
    fn observe<'a>(self: Box<Self>, context: &'a WorkContext) -> Observation<'a>;
}

struct Accepted<M: Machine> {
    spec: &'static Spec,
    request: M::Request,
}

impl<M: Machine> PaidWork for Accepted<M> {
    fn observe<'a>(self: Box<Self>, context: &'a WorkContext) -> Observation<'a> {
        Box::pin(async move {
            // Every outbound read of the call, retries included, ends within the machine's
            // own budget, so that a slow upstream is its HOLD, not work the gate must cut.
            let context =
                context.for_call(self.spec, Instant::now() + self.spec.overall_timeout())?;
            let call = Call {
                context: &context,
                spec: self.spec,
                request: &self.request,
            };
            let answer = M::observe(call).await?;
            // Sized for a typical answer, so the buffer is not regrown as it fills.
            let mut body = Vec::with_capacity(ANSWER_BUFFER_BYTES);
            // Our answers have string keys only: serializing them cannot fail.
            let _ = serde_json::to_writer(&mut body, &answer);
            Ok(body)
        })
    }
}

/// A request the schema accepted but a machine's semantic check refuses, before any payment
/// is asked for, naming the field when there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CheckFailure {
    /// The stable error code.
    pub code: String,
    /// The JSON pointer of the offending field.
    pub field: Option<String>,
    /// What is wrong, for the caller.
    pub message: String,
}

impl CheckFailure {
    /// A refusal of the whole request.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        CheckFailure {
            code: code.into(),
            field: None,
            message: message.into(),
        }
    }

    /// A refusal naming the offending field (a JSON pointer such as `/asset/symbol`).
    pub fn field(
        code: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        CheckFailure {
            code: code.into(),
            field: Some(field.into()),
            message: message.into(),
        }
    }
}

/// Why a machine cannot take paid calls on this deployment (no payment is asked for).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct NotReady {
    /// The stable error code.
    pub code: &'static str,
    /// What is missing, for the caller.
    pub message: String,
}

impl NotReady {
    /// A machine that cannot run, with a stable code.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        NotReady {
            code,
            message: message.into(),
        }
    }
}

/// What a machine's paid work may use: the counted gateway and the configured providers.
#[derive(Clone)]
pub struct WorkContext {
    /// The one counted outbound gateway.
    pub gateway: Gateway,
    /// The deployment's configuration (provider URLs among it); shared, so that each paid
    /// call's bounded copy of the context ([`WorkContext::for_call`]) is cheap.
    pub config: Arc<Config>,
    /// In-process cache of upstream observations (VM04's optional cache).
    pub cache: TtlCache,
}

impl WorkContext {
    /// The context of one paid call of `machine`: its gateway connects within the machine's
    /// `connect_timeout_ms` (when the manifest sets one) and ends every request by
    /// `deadline`.
    pub fn for_call(&self, machine: &Spec, deadline: Instant) -> Result<WorkContext, WorkError> {
        let gateway = match machine.limit("connect_timeout_ms") {
            Some(ms) => self
                .gateway
                .with_connect_timeout(Duration::from_millis(ms))
                .map_err(|e| WorkError::Client(e.to_string()))?,
            None => self.gateway.clone(),
        };
        Ok(WorkContext {
            gateway: gateway.ending_by(deadline),
            config: Arc::clone(&self.config),
            cache: self.cache.clone(),
        })
    }

    /// The configured JSON-RPC URL of a CAIP-2 chain.
    pub fn rpc_url(&self, chain: &str) -> Option<&Secret> {
        self.config.rpc_url(chain)
    }

    /// The configured inventory provider (alchemy_getTokenBalances) of a CAIP-2 chain.
    pub fn inventory_url(&self, chain: &str) -> Option<&Secret> {
        self.config.inventory_url(chain)
    }
}

/// A failure of our own while producing an observation (upstream failures are not errors:
/// they are truthful HOLD/PARTIAL results). Recorded in the ledger; the caller is told only
/// that the work failed and nothing was charged.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    /// A request field the pre-payment checks accepted cannot be read now: a bug of ours.
    #[error("{field} passed the pre-payment checks but cannot be read now")]
    Unreadable {
        /// The field.
        field: String,
    },
    /// The manifest lacks, or holds an unusable, value the machine runs with.
    #[error("{machine} manifest: {what}")]
    Manifest {
        /// The machine id.
        machine: String,
        /// What is missing or unusable.
        what: String,
    },
    /// A provider the machine reads is not configured (readiness should have refused).
    #[error("no {0} is configured")]
    NotConfigured(String),
    /// The discovery provider could not be read as configured.
    #[error(transparent)]
    Discovery(#[from] crate::providers::discovery::DiscoveryError),
    /// The x402 probe could not be set up.
    #[error(transparent)]
    Probe(#[from] crate::web::x402_probe::ProbeError),
    /// The token reads could not be set up.
    #[error(transparent)]
    TokenReads(#[from] crate::chain::token_reads::TokenReadError),
    /// The page fetcher could not be set up.
    #[error(transparent)]
    Fetch(#[from] crate::web::fetch::FetchSetupError),
    /// The outbound HTTP client of the machine's connect timeout could not be built.
    #[error("the outbound HTTP client could not be built: {0}")]
    Client(String),
}

impl WorkError {
    /// A request field that cannot be read although it passed the checks.
    pub fn unreadable(field: impl Into<String>) -> Self {
        WorkError::Unreadable {
            field: field.into(),
        }
    }

    /// A manifest value the machine needs that is missing or unusable.
    pub fn manifest(machine: &str, what: impl Into<String>) -> Self {
        WorkError::Manifest {
            machine: machine.to_string(),
            what: what.into(),
        }
    }
}

/// A numeric limit the machine's work runs with. Required, never defaulted in code, so that
/// machines.yaml stays its only source.
pub(crate) fn limit(spec: &Spec, name: &str) -> Result<u64, WorkError> {
    spec.limit(name)
        .ok_or_else(|| WorkError::manifest(&spec.machine, format!("no limit {name}")))
}

/// A limit in milliseconds ([`limit`]), as a duration.
pub(crate) fn limit_ms(spec: &Spec, name: &str) -> Result<std::time::Duration, WorkError> {
    limit(spec, name).map(std::time::Duration::from_millis)
}

/// Something a machine's paid work reads, which this deployment must provide before a caller
/// pays for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The JSON-RPC endpoint of a CAIP-2 chain.
    Rpc(&'static str),
    /// The token inventory provider of a CAIP-2 chain (the URL usually carries the credential).
    Inventory(&'static str),
    /// The DEX pricing API.
    Pricing,
    /// The Lido API.
    Lido,
    /// The x402 discovery index, and the machine's discovery limits in the manifest.
    Discovery,
    /// The page fetcher, and the machine's fetch and text limits in the manifest.
    Fetch,
    /// The unpaid x402 probe, and its limits in the manifest.
    Probe,
}

impl Need {
    /// Whether this deployment provides it for the machine.
    fn ready(self, spec: &Spec, config: &Config) -> Result<(), NotReady> {
        let configured = |present: bool, what: &str| match present {
            true => Ok(()),
            false => provider_missing(spec, what),
        };
        match self {
            Need::Rpc(chain) => {
                configured(
                    config.rpc_url(chain).is_some(),
                    &format!("the {chain} RPC endpoint"),
                )?;
                self.chain_ready(spec, config)
            }
            Need::Inventory(chain) => {
                configured(
                    config.inventory_url(chain).is_some(),
                    &format!("the {chain} inventory provider (credential)"),
                )?;
                self.chain_ready(spec, config)
            }
            Need::Pricing => {
                configured(config.dexscreener_url.is_some(), "the DEX pricing API URL")
            }
            Need::Lido => configured(config.lido_api_url.is_some(), "the Lido API URL"),
            Need::Discovery => listing::readiness(spec, config),
            Need::Fetch => vm01::fetch_ready(spec, config),
            Need::Probe => probe_reads::probe_ready(spec, config),
        }
    }
}

impl Need {
    /// The endpoint set an RPC or inventory need reads through.
    fn endpoint_set(self, config: &Config) -> Option<Arc<EndpointSet>> {
        match self {
            Need::Rpc(chain) => networks::by_caip2(chain).map(|c| EndpointSet::rpc(config, c)),
            Need::Inventory(chain) => {
                networks::by_caip2(chain).map(|c| EndpointSet::inventory(config, c))
            }
            _ => None,
        }
    }

    /// For an RPC or inventory need: not ready when every configured endpoint answered
    /// another chain's `eth_chainId`.
    fn chain_ready(self, spec: &Spec, config: &Config) -> Result<(), NotReady> {
        match self.endpoint_set(config) {
            Some(set) => chain_verdict(spec, &set),
            None => Ok(()),
        }
    }
}

/// The verdict of one endpoint set's chain checks (those of start-up and of the readiness
/// loop). The message names the settings and the chains they answered, never a URL.
fn chain_verdict(spec: &Spec, set: &EndpointSet) -> Result<(), NotReady> {
    match set.mismatch() {
        Some(why) => Err(NotReady::new(
            "provider_wrong_chain",
            format!(
                "{} is not available on this deployment: {why}",
                spec.machine
            ),
        )),
        None => Ok(()),
    }
}

/// A machine's RPC and inventory endpoint sets, held for its requests: the configuration was
/// settled at start-up, but an endpoint's chain is re-checked by the readiness loop, and each
/// request reads the verdicts as they stand.
pub struct ChainChecks(Vec<Arc<EndpointSet>>);

impl ChainChecks {
    fn of(needs: &[Need], config: &Config) -> ChainChecks {
        ChainChecks(
            needs
                .iter()
                .filter_map(|need| need.endpoint_set(config))
                .collect(),
        )
    }

    /// Not ready when every endpoint of one of the sets answers another chain.
    pub fn check(&self, spec: &Spec) -> Result<(), NotReady> {
        self.0.iter().try_for_each(|set| chain_verdict(spec, set))
    }
}

/// The readiness answer of a machine whose provider is not configured.
pub fn provider_missing(machine: &Spec, what: &str) -> Result<(), NotReady> {
    Err(NotReady::new(
        "provider_not_configured",
        format!(
            "{} is not available on this deployment: {what} is not configured",
            machine.machine
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::embedded::MANIFEST;

    #[test]
    fn a_paid_calls_gateway_connects_within_the_machines_own_limit() {
        let context = WorkContext {
            gateway: Gateway::new().expect("gateway"),
            config: Arc::new(Config::from_env([]).expect("defaults")),
            cache: TtlCache::default(),
        };
        let vm02 = MANIFEST.machine("VM02").expect("VM02");
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut quick = vm02.clone();
        quick.limits.insert("connect_timeout_ms".into(), 750.into());
        let call = context.for_call(&quick, deadline).expect("context");
        assert_eq!(call.gateway.connect_timeout(), Duration::from_millis(750));
        assert!(
            call.gateway
                .time_left()
                .is_some_and(|left| left <= Duration::from_secs(1))
        );
        let declared = vm02.limit("connect_timeout_ms").expect("declared");
        let call = context.for_call(vm02, deadline).expect("context");
        assert_eq!(
            call.gateway.connect_timeout(),
            Duration::from_millis(declared)
        );
        assert_eq!(call.gateway.outbound_requests(), 0, "one shared count");
    }

    /// The chains a machine's code reads are the chains its manifest entry allowlists
    /// (`allowlists.networks`, or VM04's `chain_ids`): a machine cannot read a chain its
    /// published entry does not name, nor name one it never reads.
    #[test]
    fn every_machines_rpc_needs_are_the_chains_its_manifest_allowlists() {
        for entry in REGISTRY {
            let spec = MANIFEST
                .machine(entry.id())
                .expect("registered machine in manifest");
            let mut read: Vec<String> = entry
                .needs()
                .iter()
                .filter_map(|need| match need {
                    Need::Rpc(chain) => Some(chain.to_string()),
                    _ => None,
                })
                .collect();
            let networks = spec.allowlists.get("networks").map(|list| {
                list.as_array()
                    .expect("a list")
                    .iter()
                    .map(|caip2| caip2.as_str().expect("a CAIP-2 id").to_string())
                    .collect::<Vec<_>>()
            });
            let chain_ids = spec.allowlists.get("chain_ids").map(|list| {
                list.as_array()
                    .expect("a list")
                    .iter()
                    .map(|id| format!("eip155:{}", id.as_u64().expect("a chain id")))
                    .collect::<Vec<_>>()
            });
            let mut allowed = networks.or(chain_ids).unwrap_or_default();
            read.sort();
            allowed.sort();
            assert_eq!(read, allowed, "{}", entry.id());
        }
    }

    #[test]
    fn a_limit_missing_from_the_manifest_is_an_error_not_a_default() {
        let vm02 = MANIFEST
            .machines
            .iter()
            .find(|m| m.machine == "VM02")
            .expect("VM02");
        assert_eq!(
            limit_ms(vm02, "response_timeout_ms").expect("declared"),
            std::time::Duration::from_millis(vm02.limit("response_timeout_ms").expect("set"))
        );
        let mut trimmed = vm02.clone();
        trimmed.limits.remove("response_timeout_ms");
        let error = limit(&trimmed, "response_timeout_ms").expect_err("no default");
        assert_eq!(
            error.to_string(),
            "VM02 manifest: no limit response_timeout_ms"
        );
    }
}
