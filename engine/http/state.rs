//! The server's shared state, prepared once at start-up: the free documents, each paid
//! path's validator, challenge and readiness, the payment rail, and the count of open paid
//! calls. The public listener (`server`) and the admin listener (`admin`) both read it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::catalog::challenge::{self, Challenge};
use crate::catalog::embedded::{self, MANIFEST};
use crate::catalog::manifest::{Machine, Manifest};
use crate::catalog::render::{self, BASE_URL_TOKEN};
use crate::catalog::storefront;
use crate::chain::authorization::AuthorizationReader;
use crate::config::Config;
use crate::evidence::{self, Identity, OfferPayload};
use crate::http::body::RequestValidator;
use crate::http::connections::ConnectionCounters;
use crate::http::free_docs::FreeDoc;
use crate::http::response::{JSON, PreparedChallenge};
use crate::machines::{self, ChainChecks, Entry, NotReady, WorkContext};
use crate::net::gateway::Gateway;
use crate::pay::call::PaymentRail;
use crate::pay::echo::Declared;
use crate::pay::facilitator::{Authorizer, FacilitatorClient};
use crate::pay::ledger;
use crate::pay::local_check;
use crate::pay::reconcile_pass::ReconcilePass;
use crate::pay::retained::{DeliverySecret, Retention};
use crate::support::metrics::{RouteCounters, metrics};

/// RPC answer timeout of the chain check after a failed settle: the buyer is waiting.
const SETTLE_CHECK_RPC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// The DID document's media type (DID Core §6.2).
const DID_JSON: &str = "application/did+json";

/// Everything a paid path needs, prepared at start-up.
pub(super) struct PaidRoute {
    pub(super) machine: &'static Machine,
    pub(super) validator: RequestValidator,
    pub(super) entry: &'static dyn Entry,
    pub(super) max_body: usize,
    /// Its unpaid 402. None when no pay_to is configured: valid requests answer 503
    /// service_disabled.
    pub(super) challenge: Option<PreparedChallenge>,
    /// The PaymentRequirements a payment's `accepted` must match. Shared: each paid call's
    /// task holds it, and a deep copy per call showed in the paid path's profile.
    pub(super) requirement: Option<Arc<Value>>,
    /// The `offer-receipt` extension with the signed offer of its requirement, signed once
    /// at start-up (every 402 carries it); None when signing is off or no pay_to is set.
    pub(super) offers: Option<Value>,
    /// What the route's 402 declared: the buyer's echo is checked against it, and the
    /// facilitator gets it instead of the echo. Shared with each paid call's task.
    pub(super) declared: Option<Arc<Declared>>,
    /// Whether this deployment configures what the machine needs: a configuration fact, so
    /// it is settled at start-up and a machine that cannot serve never asks for a payment.
    pub(super) readiness: Result<(), NotReady>,
    /// Its RPC and inventory endpoint sets, whose chains each request checks.
    pub(super) chain_checks: ChainChecks,
    /// Its requests, counted under its machine id.
    pub(super) counters: RouteCounters,
}

/// Shared, immutable state of a running server.
pub struct AppState {
    /// Paid calls between their start and their ledger record, for the shutdown drain.
    pub(super) in_flight: InFlight,
    /// The configuration the server runs with.
    pub config: Config,
    /// The base URL the published documents carry.
    pub base_url: String,
    /// The counted outbound gateway (tests read its count).
    pub gateway: Gateway,
    /// Connection events (cap, deadlines, hang-ups), counted.
    pub connections: Arc<ConnectionCounters>,
    pub(crate) rail: Option<PaymentRail>,
    /// The evidence signing identity; None when no signing key is configured.
    pub evidence: Option<Arc<Identity>>,
    pub(super) work: WorkContext,
    pub(super) free: Routes<FreeDoc>,
    pub(super) paid: Routes<PaidRoute>,
    /// Requests for the free documents, counted under `machine="free"`.
    pub(super) free_counters: RouteCounters,
    /// Requests for no known path, counted under `machine="none"`.
    pub(super) unknown_counters: RouteCounters,
}

/// What each path serves. The keys are our own paths, so a hash keyed per process and
/// cheaper than SipHash (foldhash's, as hashbrown's default) is enough; every request looks
/// its path up here.
pub(super) type Routes<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listen address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Something prepared at start-up failed (ledger, TLS, renders).
    #[error("start-up preparation failed: {0}")]
    Prepare(String),
}

impl AppState {
    pub(super) fn prepare(config: Config, base_url: String) -> Result<AppState, StartError> {
        let manifest: &'static Manifest = &MANIFEST;
        let gateway = Gateway::new().map_err(|e| StartError::Prepare(e.to_string()))?;
        let rail = payment_rail(&config, &gateway)?;
        let evidence = signing_identity(&config, &base_url)?;
        let free = free_documents(manifest, &base_url, &config, evidence.as_deref())?;
        let mut paid = Routes::default();
        for machine in &manifest.machines {
            let route =
                PaidRoute::prepare(manifest, machine, &base_url, &config, evidence.as_deref())?;
            paid.insert(machine.path.clone(), route);
        }
        let work = WorkContext {
            gateway: gateway.clone(),
            config: Arc::new(config.clone()),
            cache: Default::default(),
        };
        Ok(AppState {
            in_flight: InFlight::default(),
            config,
            base_url,
            gateway,
            connections: Default::default(),
            rail,
            evidence,
            work,
            free,
            paid,
            free_counters: metrics().route("free", &[200, 304]),
            unknown_counters: metrics().route("none", &[404]),
        })
    }

    /// Payments refused by the local check before any facilitator call.
    pub fn payments_refused_locally(&self) -> u64 {
        self.rail.as_ref().map_or(0, |rail| {
            rail.refused_locally
                .load(std::sync::atomic::Ordering::Relaxed)
        })
    }

    /// Migrates the ledger (a PostgreSQL that is down now is migrated by the first paid call
    /// that reaches it), then reports rows left `reserved` by an earlier process: paid work
    /// whose end is unknown. They are reported, never dropped. A database that refuses
    /// these settings (a certificate that fails, TLS it requires) stops start-up: waiting
    /// would not mend it.
    pub(super) async fn report_unfinished_attempts(&self) -> Result<(), StartError> {
        let Some(rail) = &self.rail else {
            return Ok(());
        };
        match rail.ledger.migrate().await {
            Ok(()) => {}
            Err(error) if error.is_refusal() => {
                return Err(StartError::Prepare(format!(
                    "ledger {} ({}): {error}",
                    ledger::redacted(self.config.database_url.expose()),
                    ledger::tls::described(self.config.database_url.expose()),
                )));
            }
            Err(error) => {
                tracing::error!(%error, "the ledger is unavailable at start-up; paid calls answer 503 ledger_unavailable until it is reachable");
                return Ok(());
            }
        }
        match rail.ledger.reserved().await {
            Ok(rows) if rows.is_empty() => {}
            Ok(rows) => {
                for row in &rows {
                    tracing::warn!(
                        attempt = row.id, machine = %row.machine, payer = %row.payer,
                        amount_atomic = %row.amount_atomic, created_at = %row.created_at,
                        nonce = row.nonce.as_deref().unwrap_or("unknown"),
                        valid_before = row.valid_before.as_deref().unwrap_or("unknown"),
                        request_id = row.request_id.as_deref().unwrap_or("unknown"),
                        "ledger row left reserved by an earlier run: settlement outcome unknown; its buyer's resend decides it from the chain (and runs the work once more if it was paid), else the reconcile pass does a day after validBefore; `factomat ledger reconcile` decides it now, and the buyer's resend then still runs the work once more within its window (at delivery_retention_seconds = 0, a day)"
                    );
                }
                tracing::warn!(
                    count = rows.len(),
                    "unfinished paid attempts found at start-up"
                );
            }
            Err(error) => tracing::error!(%error, "could not read unfinished ledger rows"),
        }
        Ok(())
    }

    /// Deletes expired retained answers on a timer, on every replica (idempotent).
    pub(super) fn sweep_retained_in_background(&self) {
        let Some(rail) = &self.rail else { return };
        let retention = &rail.retention;
        let (ledger, every) = (Arc::clone(&rail.ledger), retention.sweep_interval());
        let held_window = retention.held_window_seconds();
        tokio::spawn(async move {
            let mut timer = tokio::time::interval(every);
            loop {
                timer.tick().await;
                let now = crate::pay::call::unix_now();
                match ledger.sweep_retained(now, held_window).await {
                    Ok(0) => {}
                    Ok(swept) => {
                        metrics().retained_expired(swept);
                        tracing::debug!(swept, "expired retained answers deleted");
                    }
                    Err(error) => tracing::warn!(%error, "could not sweep retained answers"),
                }
            }
        });
    }

    /// The reconcile pass (`pay::reconcile_pass`) every `reconcile_interval_seconds` after
    /// the last one ended, on every replica (each change is conditional on the state read).
    /// Off at 0, or without a payment chain reader.
    pub(super) fn reconcile_in_background(&self) {
        let seconds = self.config.reconcile_interval_seconds;
        let Some(rail) = self.rail.as_ref().filter(|_| seconds > 0) else {
            return;
        };
        let Some(chain) = rail.chain.clone() else {
            return;
        };
        let pass = ReconcilePass {
            ledger: Arc::clone(&rail.ledger),
            chain,
            strike_seconds: rail.strike_seconds,
            buyer_first_seconds: rail.retention.held_window_seconds(),
            interval: std::time::Duration::from_secs(seconds),
            backoff: HashMap::new(),
        };
        tokio::spawn(pass.run_forever());
    }

    /// `GET /supported` once; a facilitator without exact on our network gets a warning.
    pub(super) fn check_facilitator_in_background(&self) {
        let Some(rail) = &self.rail else { return };
        let facilitator = rail.facilitator.clone();
        let (scheme, network) = (
            MANIFEST.payment.scheme.clone(),
            MANIFEST.payment.network.clone(),
        );
        tokio::spawn(async move {
            match facilitator.supports(&scheme, &network).await {
                Ok(true) => {
                    tracing::info!(%scheme, %network, "facilitator supports our payment kind")
                }
                Ok(false) => {
                    tracing::warn!(%scheme, %network, "facilitator /supported does not list our payment kind; payments may fail")
                }
                Err(error) => tracing::warn!(%error, "facilitator /supported check failed"),
            }
        });
    }
}

fn payment_rail(config: &Config, gateway: &Gateway) -> Result<Option<PaymentRail>, StartError> {
    // Checked even without a facilitator URL: a bad key is a configuration error either way.
    let auth = Authorizer::from_config(&config.facilitator_auth)
        .map_err(|e| StartError::Prepare(format!("facilitator_api_key_secret: {e}")))?;
    let Some(url) = &config.facilitator_url else {
        return Ok(None);
    };
    let database_url = config.database_url.expose();
    let ledger =
        ledger::open(database_url, ledger::PoolOptions::from_config(config)).map_err(|e| {
            StartError::Prepare(format!("ledger {}: {e}", ledger::redacted(database_url)))
        })?;
    tracing::info!(facilitator_auth = auth.mode(), "facilitator authentication");
    let facilitator = FacilitatorClient::new(
        gateway.clone(),
        url.clone(),
        auth,
        std::time::Duration::from_millis(config.facilitator_verify_timeout_ms),
        std::time::Duration::from_millis(config.facilitator_settle_timeout_ms),
    );
    let chain = AuthorizationReader::from_config(gateway.clone(), config, SETTLE_CHECK_RPC_TIMEOUT);
    let domain = local_check::payment_domain(&MANIFEST.payment)
        .map_err(|e| StartError::Prepare(e.to_string()))?;
    Ok(Some(PaymentRail {
        facilitator,
        ledger: Arc::new(ledger),
        chain,
        domain,
        settlement_wait: std::time::Duration::from_millis(config.settlement_wait_ms),
        strike_seconds: config.unpaid_strike_seconds,
        refused_locally: Default::default(),
        signatures_deferred: Default::default(),
        listing: Default::default(),
        retention: retention(config)?,
        pending_reads: Default::default(),
        reruns: Default::default(),
    }))
}

/// The retention of paid answers and the secret that seals them. Without a configured
/// secret file, a SQLite deployment gets one generated beside its ledger file; a PostgreSQL
/// one (several replicas must share the secret) does not start. A result held back while its
/// settlement is pending is retained whatever the windows: `delivery_retention_seconds = 0`
/// keeps no answer once delivered, but never leaves a paid buyer without theirs.
fn retention(config: &Config) -> Result<Retention, StartError> {
    if config.delivery_retention_seconds == 0 {
        tracing::info!(
            "delivery_retention_seconds = 0: delivered answers are not retained; an answer never delivered (a result held while its settlement is pending, a paid call its replica stopped before recording) is still owed, for a day"
        );
    }
    let refused = |e: crate::pay::retained::RetainedError| StartError::Prepare(e.to_string());
    let secret = match (
        &config.delivery_key_file,
        ledger::sqlite_path(config.database_url.expose()),
    ) {
        (Some(path), _) => DeliverySecret::load(path).map_err(refused)?,
        (None, Some(ledger_file)) => {
            let path = std::path::PathBuf::from(format!("{}.delivery-key", ledger_file.display()));
            if path.exists() {
                DeliverySecret::load(&path).map_err(refused)?
            } else {
                let secret = DeliverySecret::generate(&path).map_err(refused)?;
                tracing::warn!(path = %path.display(), "generated the secret that seals retained paid answers (delivery_key_file); keep it with the ledger file, and set delivery_key_file to use your own");
                secret
            }
        }
        (None, None) => {
            return Err(StartError::Prepare(
                "delivery_key_file is required with a PostgreSQL ledger (every replica must share the secret that seals retained paid answers, and the results held while a settlement is pending); generate one with `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'`".into(),
            ));
        }
    };
    Ok(Retention {
        with_id_seconds: config.delivery_retention_seconds,
        without_id_seconds: config.delivery_collect_without_id_seconds,
        in_flight_wait: std::time::Duration::from_millis(config.delivery_in_flight_wait_ms),
        secret,
    })
}

/// The evidence signing identity of the configured keys; a key that cannot be read or sign
/// stops start-up.
fn signing_identity(config: &Config, base_url: &str) -> Result<Option<Arc<Identity>>, StartError> {
    let identity = Identity::load(
        base_url,
        &config.evidence_signing_key_files,
        &config.evidence_retired_public_keys,
    )
    .map_err(|e| StartError::Prepare(format!("evidence_signing_key_file: {e}")))?;
    match &identity {
        Some(identity) => tracing::info!(
            did = identity.did(),
            kid = identity.kid(),
            published_keys = identity.published_keys(),
            "evidence signing on"
        ),
        None if !config.evidence_retired_public_keys.is_empty() => tracing::warn!(
            "evidence_retired_public_keys is set but no evidence_signing_key_file: signing is off and no DID document is served"
        ),
        None => {}
    }
    Ok(identity.map(Arc::new))
}

/// The `offer-receipt` extension of a route: its one `accepts[]` entry's offer, signed now
/// and reused by every 402.
fn signed_offers(
    identity: &Identity,
    machine: &Machine,
    base_url: &str,
    requirement: &Value,
) -> Result<Value, StartError> {
    let resource_url = challenge::resource_url(base_url, machine);
    let offer = OfferPayload::from_requirement(&resource_url, requirement)
        .and_then(|payload| identity.sign_offer(&payload, 0))
        .map_err(|e| StartError::Prepare(format!("{}: offer: {e}", machine.machine)))?;
    Ok(evidence::offer_extension(&[offer], true))
}

impl PaidRoute {
    fn prepare(
        manifest: &'static Manifest,
        machine: &'static Machine,
        base_url: &str,
        config: &Config,
        evidence: Option<&Identity>,
    ) -> Result<PaidRoute, StartError> {
        let pay_to = config.pay_to.as_deref();
        let validator =
            RequestValidator::new(machine).map_err(|e| StartError::Prepare(e.to_string()))?;
        let entry = machines::find(&machine.machine)
            .ok_or_else(|| StartError::Prepare(format!("{} has no module", machine.machine)))?;
        let requirement = pay_to.map(|pay_to| render::requirement(manifest, machine, Some(pay_to)));
        let offers = match (evidence, &requirement) {
            (Some(identity), Some(requirement)) => {
                Some(signed_offers(identity, machine, base_url, requirement)?)
            }
            _ => None,
        };
        let challenge = pay_to
            .map(|pay_to| {
                Challenge::for_machine(manifest, machine, base_url, pay_to, None, offers.as_ref())
            })
            .transpose()
            .map_err(|e| {
                StartError::Prepare(format!("{}: challenge header: {e}", machine.machine))
            })?;
        if let Some(challenge) = &challenge
            && offers.is_some()
            && !challenge.offers_in_header
        {
            tracing::info!(
                machine = %machine.machine,
                "the signed offer rides in the 402 body only: with it the PAYMENT-REQUIRED header would exceed the budget of a default proxy buffer"
            );
        }
        if let Some(challenge) = &challenge
            && challenge.header.len() > challenge::HEADER_BUDGET
        {
            tracing::warn!(
                machine = %machine.machine,
                header_bytes = challenge.header.len(),
                budget = challenge::HEADER_BUDGET,
                "PAYMENT-REQUIRED header exceeds the budget of a default proxy buffer; shorten base_url"
            );
        }
        let declared = match (pay_to, &requirement, &challenge) {
            (Some(pay_to), Some(requirement), Some(challenge)) => Some(declared(
                manifest,
                machine,
                base_url,
                pay_to,
                requirement,
                challenge,
            )?),
            _ => None,
        };
        let max_body = usize::try_from(manifest.max_request_bytes(machine)).unwrap_or(usize::MAX);
        Ok(PaidRoute {
            machine,
            validator,
            entry,
            max_body,
            challenge: challenge.as_ref().map(PreparedChallenge::new),
            requirement: requirement.map(Arc::new),
            offers,
            declared: declared.map(Arc::new),
            readiness: entry.readiness(machine, config),
            chain_checks: entry.chain_checks(config),
            counters: metrics().route(machine.machine.as_str(), &[200, 400, 402, 503]),
        })
    }
}

/// The requirement, resource and extensions a machine's 402 declares, in the header and in
/// the body. The header's are read back from the header as served, so what a client echoes
/// of it is what `Declared` expects byte for byte.
fn declared(
    manifest: &Manifest,
    machine: &Machine,
    base_url: &str,
    pay_to: &str,
    requirement: &Value,
    served: &Challenge,
) -> Result<Declared, StartError> {
    let header = challenge::decode_header(&served.header).ok_or_else(|| {
        StartError::Prepare(format!(
            "{}: the challenge header does not decode",
            machine.machine
        ))
    })?;
    let body = challenge::payment_required(manifest, machine, base_url, pay_to, None);
    let extensions = |value: &Value| {
        value
            .get("extensions")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    Declared::new(
        requirement,
        body.get("resource").cloned().unwrap_or_default(),
        header.get("resource").unwrap_or(&Value::Null),
        extensions(&header),
        extensions(&body),
    )
    .map_err(|e| StartError::Prepare(format!("{}: declared terms: {e}", machine.machine)))
}

fn with_base_url(render_path: &str, base_url: &str) -> Result<Bytes, StartError> {
    let text = embedded::render(render_path)
        .ok_or_else(|| StartError::Prepare(format!("render {render_path} missing")))?;
    Ok(Bytes::from(text.replace(BASE_URL_TOKEN, base_url)))
}

fn free_documents(
    manifest: &Manifest,
    base_url: &str,
    config: &Config,
    evidence: Option<&Identity>,
) -> Result<Routes<FreeDoc>, StartError> {
    let mut docs = Routes::default();
    let max_age = manifest.service.free_document_max_age_seconds;
    let mut add = |path: String, content_type: &'static str, body: Bytes| {
        let doc = FreeDoc::prepare(content_type, body, max_age)
            .map_err(|e| StartError::Prepare(format!("{path}: {e}")))?;
        docs.insert(path, doc);
        Ok::<(), StartError>(())
    };
    for (path, render_path, content_type) in render::FREE_DOCUMENTS {
        let body = with_base_url(render_path, base_url)?;
        let body = with_ownership_proofs(path, body, &config.ownership_proofs)?;
        add(path.into(), content_type, body)?;
    }
    for (path, render_path, content_type) in storefront::documents(manifest) {
        add(path, content_type, with_base_url(&render_path, base_url)?)?;
    }
    if let Some(captured) = captured_sample(manifest, &config.sample_path) {
        let text = captured.to_string().replace(BASE_URL_TOKEN, base_url);
        add(render::SAMPLE_PATH.into(), JSON, Bytes::from(text))?;
    }
    for machine in &manifest.machines {
        add(
            format!("{}{}.md", render::DOCS_PREFIX, machine.machine),
            "text/markdown; charset=utf-8",
            with_base_url(&render::machine_doc_path(machine), base_url)?,
        )?;
    }
    if let Some(identity) = evidence {
        let document = serde_json::to_vec(&identity.did_document())
            .map_err(|e| StartError::Prepare(format!("DID document: {e}")))?;
        add(
            identity.document_path().into(),
            DID_JSON,
            Bytes::from(document),
        )?;
    }
    add(
        render::HEALTH_PATH.into(),
        JSON,
        health_document(manifest, config, evidence),
    )?;
    Ok(docs)
}

/// The OpenAPI document (`x-discovery.ownershipProofs`) and `/.well-known/x402`
/// (`ownershipProofs`) with the configured ownership proofs, which config checked at
/// start-up; every other document, and both without proofs, unchanged.
fn with_ownership_proofs(path: &str, body: Bytes, proofs: &[String]) -> Result<Bytes, StartError> {
    if proofs.is_empty() || (path != render::OPENAPI_PATH && path != render::WELL_KNOWN_PATH) {
        return Ok(body);
    }
    let mut document: Value =
        serde_json::from_slice(&body).map_err(|e| StartError::Prepare(format!("{path}: {e}")))?;
    if path == render::OPENAPI_PATH {
        document["x-discovery"]["ownershipProofs"] = json!(proofs);
    } else {
        document["ownershipProofs"] = json!(proofs);
    }
    Ok(Bytes::from(render::pretty(&document)))
}

/// The served document of a stored VM04 capture, read once at start-up; None (the
/// illustrative example is served) when there is none or it is unusable, which is logged.
fn captured_sample(manifest: &Manifest, path: &std::path::Path) -> Option<serde_json::Value> {
    let machine = manifest.machine(render::SAMPLE_MACHINE)?;
    match crate::catalog::sample::load(machine, path) {
        Ok(Some(stored)) => {
            tracing::info!(path = %path.display(), captured_at = %stored["captured_at"], "serving the captured VM04 sample");
            Some(crate::catalog::sample::captured_document(machine, &stored))
        }
        Ok(None) => None,
        Err(error) => {
            tracing::warn!(%error, "captured sample not served; serving the illustrative example");
            None
        }
    }
}

/// The health object (schema `Health`): static facts of this process, no upstream work.
fn health_document(manifest: &Manifest, config: &Config, evidence: Option<&Identity>) -> Bytes {
    let pay_to_configured = config.pay_to.is_some();
    let ready = pay_to_configured && config.facilitator_url.is_some();
    let body = json!({
        "status": if ready { "ok" } else { "degraded" },
        "service": manifest.service.name,
        "catalog_version": manifest.service.catalog_version,
        "api_version": manifest.service.api_version,
        "version": env!("CARGO_PKG_VERSION"),
        "machines": manifest.machines.len(),
        "machine_readiness": machine_readiness(manifest, config),
        "payment": {
            "network": manifest.payment.network,
            "scheme": manifest.payment.scheme,
            "asset": manifest.payment.asset,
            "pay_to_configured": pay_to_configured,
            "facilitator_configured": config.facilitator_url.is_some(),
            "rail": if config.facilitator_url.is_some() { "configured" } else { "not_configured" },
            "unpaid_empty_body": config.unpaid_empty_body.as_str(),
        },
        "evidence": evidence_health(evidence),
    });
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

/// Whether offers, receipts and seals are signed, and by whom.
fn evidence_health(evidence: Option<&Identity>) -> Value {
    match evidence {
        Some(identity) => json!({
            "signing": "on",
            "did": identity.did(),
            "kid": identity.kid(),
            "did_document": identity.document_path(),
        }),
        None => json!({"signing": "off"}),
    }
}

/// Each machine's readiness from configuration: whether this deployment sells it, and if
/// not, the 503 its requests answer (never a secret: messages name what is missing).
fn machine_readiness(manifest: &Manifest, config: &Config) -> Vec<Value> {
    manifest
        .machines
        .iter()
        .map(|machine| {
            let mut entry = json!({"machine": machine.machine, "path": machine.path});
            let readiness = machines::find(&machine.machine)
                .map(|registered| registered.readiness(machine, config));
            match readiness.unwrap_or(Ok(())) {
                Ok(()) => entry["ready"] = json!(true),
                Err(error) => {
                    entry["ready"] = json!(false);
                    entry["code"] = json!(error.code);
                    entry["message"] = json!(error.message);
                }
            }
            entry
        })
        .collect()
}

/// A count of open paid calls that can be awaited until it reaches zero.
#[derive(Clone, Default)]
pub(super) struct InFlight(Arc<(std::sync::atomic::AtomicUsize, tokio::sync::Notify)>);

/// Holds one paid call open until dropped.
pub(super) struct InFlightGuard(InFlight);

impl InFlight {
    pub(super) fn enter(&self) -> InFlightGuard {
        self.0.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlightGuard(self.clone())
    }

    pub(super) fn count(&self) -> usize {
        self.0.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(super) async fn idle(&self) {
        loop {
            let notified = self.0.1.notified();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.0.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            self.0.0.1.notify_waiters();
        }
    }
}
