//! The settlement outcome of one paid call: settle, and whenever the facilitator's answer is
//! not a plain success, find the truth on chain — a proof, a bounded wait, or "pending".
//!
//! | The facilitator answers | We do |
//! |---|---|
//! | `success` with a transaction hash, on our network if it names one | paid (the facilitator's answer) |
//! | `success` naming no transaction hash, or another network | follow the chain |
//! | `settlement_pending` with a hash | `/settle` once more with the identical payload, then follow the hash |
//! | a failure naming a transaction, a timeout, a transport error | follow the chain: the outcome is unknown until it says otherwise |
//! | a refusal from its settle-time re-verification, with no transaction, to our first sending | read `authorizationState`: unused → unpaid now; used → follow |
//! | such a refusal for the payer's balance | unpaid now only once one block shows the nonce unused *and* the balance short; the payer struck unless what they paid us meanwhile covers the payment, or the node's logs do not account for their balance (to the unit, with at least the shortfall leaving them) by the wait's end, or the search fails or finds more than 10,000 transfers |
//! | either, while our node still shows the funds or a read fails | asked again each poll; pending when the wait ends. Used → follow |
//! | the same refusal to a `/settle` the gateway sent again (the first one's answer was lost) | follow the chain |
//! | any other failure with no transaction (a broadcast's answer may have been lost), `invalid_exact_evm_nonce_already_used` among them | follow the chain |
//!
//! Following polls, until the wait ends or the call's deadline: the hash's receipt (the
//! proof rule of `chain::authorization`), else `authorizationState` at a pinned block, and,
//! when it reads used, the event that spent the nonce. Definite answers only: **paid** (a
//! receipt with our Transfer), **burned** (the nonce spent by another authorization or
//! cancelled), **unpaid** (unused at a block whose timestamp is ≥ `validBefore`). Anything
//! else when the wait ends is **pending**, never unpaid. Without a chain reader we trust,
//! nothing is concluded from the chain: every non-success is pending.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use alloy_primitives::{B256, U256};
use serde_json::Value;
use tokio::time::Instant;

use crate::chain::authorization::{AuthorizationReader, Flows, PaymentTerms, ReceiptVerdict};
use crate::pay::facilitator::{FacilitatorClient, FacilitatorError, PaymentBody, SettleOutcome};
use crate::pay::ledger::AttemptRow;
use crate::pay::listing::ListingBoard;
use crate::pay::row_locks::RowLocks;

/// The reason of a payment unpaid for sure with no other reason to give: unused on chain past
/// `validBefore` (a returning buyer is told it too).
pub(crate) const SETTLEMENT_FAILED: &str = crate::pay::ledger::UNUSED_PAST_VALID_BEFORE;

/// How often a pending settlement is asked about: about one Base block.
const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// How long one chain reading about a pending row answers its resends: about a Base block.
const PENDING_READ_TTL: Duration = Duration::from_secs(2);

/// What the chain says about one payment, now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finding {
    /// A receipt proves the transfer to us.
    Paid {
        /// The transaction.
        transaction: String,
        /// The proving Transfer's log index.
        transfer_log_index: u64,
        /// What was read.
        evidence: String,
    },
    /// The nonce was spent by another authorization, or cancelled.
    Burned {
        /// The transaction that spent it.
        transaction: String,
        /// What was read.
        evidence: String,
    },
    /// Unused at a block past `validBefore`: it can never pay.
    Unpaid {
        /// What was read.
        evidence: String,
    },
    /// Not decided yet (not mined, unused but still valid, unreadable, or used with the
    /// spending event not found yet).
    Unknown {
        /// What was read.
        evidence: String,
    },
}

/// One payment as the chain is asked about it.
#[derive(Debug, Clone)]
pub(crate) struct Payment {
    /// The terms a transfer must match.
    pub terms: PaymentTerms,
    /// When the payment was presented to us (unix seconds): for a live call, just before its
    /// `/verify` was sent; for a row read back, its reservation. Event searches start a few
    /// blocks before it.
    pub presented_at: u64,
    /// The authorization's `validBefore` (unix seconds).
    pub valid_before: u64,
}

/// Asks the chain once. `hint` is a transaction the facilitator named.
pub(crate) async fn find(
    chain: &AuthorizationReader,
    payment: &Payment,
    hint: Option<&str>,
) -> Finding {
    let terms = &payment.terms;
    let mut evidence = Vec::new();
    if let Some(hash) = hint.and_then(|h| h.parse::<B256>().ok()) {
        match chain.receipt(hash, terms).await {
            Ok(Some(verdict)) => {
                if let Some(finding) = from_receipt(verdict, "receipt of the named transaction") {
                    return finding;
                }
                evidence.push(format!(
                    "transaction {hash} does not touch this authorization"
                ));
            }
            Ok(None) => evidence.push(format!("transaction {hash} has no receipt yet")),
            Err(error) => evidence.push(format!("receipt of {hash} unreadable: {error}")),
        }
    }
    let state = match chain.state(terms).await {
        Ok(state) => state,
        Err(error) => {
            evidence.push(format!("authorizationState unreadable: {error}"));
            return unknown(evidence);
        }
    };
    let at = format!("block {} (time {})", state.block, state.timestamp);
    if !state.used {
        if state.timestamp >= payment.valid_before {
            evidence.push(format!(
                "authorizationState unused at {at}, past validBefore {}: never charged",
                payment.valid_before
            ));
            return Finding::Unpaid {
                evidence: evidence.join("; "),
            };
        }
        evidence.push(format!(
            "authorizationState unused at {at}; valid until {}",
            payment.valid_before
        ));
        return unknown(evidence);
    }
    match chain
        .find_spender(terms, payment.presented_at, state.block)
        .await
    {
        Ok(Some(verdict)) => {
            let how = format!("authorizationState used at {at}; the event's transaction");
            from_receipt(verdict, &how).unwrap_or_else(|| {
                evidence.push(format!("used at {at}; the event's receipt is unrelated"));
                unknown(evidence)
            })
        }
        Ok(None) => {
            evidence.push(format!(
                "authorizationState used at {at}; the spending event is not found yet"
            ));
            unknown(evidence)
        }
        Err(error) => {
            evidence.push(format!(
                "authorizationState used at {at}; event search failed: {error}"
            ));
            unknown(evidence)
        }
    }
}

fn unknown(evidence: Vec<String>) -> Finding {
    Finding::Unknown {
        evidence: evidence.join("; "),
    }
}

fn from_receipt(verdict: ReceiptVerdict, source: &str) -> Option<Finding> {
    match verdict {
        ReceiptVerdict::Paid {
            transaction,
            transfer_log_index,
        } => Some(Finding::Paid {
            evidence: format!(
                "{source}: AuthorizationUsed then Transfer of the payment's terms (log {transfer_log_index}) in {transaction}"
            ),
            transaction,
            transfer_log_index,
        }),
        ReceiptVerdict::Burned { transaction, how } => Some(Finding::Burned {
            evidence: format!("{source}: {how} in {transaction}"),
            transaction,
        }),
        ReceiptVerdict::Unrelated => None,
    }
}

/// How one paid call's settlement ended.
#[derive(Debug, Clone)]
pub(crate) enum Settlement {
    /// Paid: deliver.
    Paid {
        /// The settlement transaction.
        transaction: String,
        /// The proving Transfer's log index, when the chain was read.
        transfer_log_index: Option<u64>,
        /// The facilitator's SettleResponse when it said success.
        response: Option<Value>,
        /// What the chain showed, when it was read.
        evidence: Option<String>,
    },
    /// The nonce was spent elsewhere or cancelled: nothing paid, the payer is struck.
    Burned {
        /// The transaction that spent it.
        transaction: String,
        /// What the chain showed.
        evidence: String,
    },
    /// Unpaid for sure: withhold and challenge again.
    Unpaid {
        /// The reason the 402 names.
        reason: String,
        /// The facilitator's SettleResponse, if any.
        response: Option<Value>,
        /// What the chain showed.
        evidence: String,
        /// The payer moved the funds away after `/verify`: they are struck.
        payer_fault: bool,
    },
    /// Unknown when the wait ended: never challenge again.
    Pending {
        /// The transaction the facilitator named, if any.
        transaction: Option<String>,
        /// Why it is still unknown.
        evidence: String,
    },
}

/// Everything one settlement needs.
pub(crate) struct Settling<'a> {
    /// The facilitator client.
    pub facilitator: &'a FacilitatorClient,
    /// A payment-chain reader we trust, if any.
    pub chain: Option<&'a AuthorizationReader>,
    /// The body sent to `/settle`: the PaymentPayload and our requirements, the same bytes
    /// `/verify` got (identical on the retry).
    pub body: &'a PaymentBody,
    /// What the chain is asked about.
    pub payment: Payment,
    /// The call's deadline (`validBefore` − 6 s).
    pub deadline: Instant,
    /// How long an unknown outcome is followed at most.
    pub wait: Duration,
    /// Where the index's verdict on the listing (`EXTENSION-RESPONSES`) is recorded.
    pub listing: &'a ListingBoard,
    /// The machine sold, for the listing record.
    pub machine: &'a str,
    /// The network the payment must settle on (CAIP-2).
    pub network: &'a str,
}

impl Settling<'_> {
    /// One `/settle` with the identical payload, its listing verdict recorded.
    async fn ask(&self) -> Result<SettleOutcome, FacilitatorError> {
        let answer = self.facilitator.settle(self.body, self.deadline).await;
        if let Ok(outcome) = &answer {
            let responses = outcome.extension_responses.as_ref();
            self.listing.record(self.machine, "settle", responses);
        }
        answer
    }
}

/// Settles and decides. The follow-ups (a second `/settle`, the chain readings) are boxed:
/// most settlements end at the first answer, and inline they would grow every paid call's
/// task.
pub(crate) async fn settle(s: &Settling<'_>) -> Settlement {
    let first = s.ask().await;
    let hint = match first {
        Ok(outcome) if outcome.success && names_our_transfer(&outcome, s.network) => {
            return Settlement::Paid {
                transaction: outcome.transaction.unwrap_or_default(),
                transfer_log_index: None,
                response: Some(outcome.response),
                evidence: None,
            };
        }
        Ok(outcome) if outcome.is_pending() => Box::pin(retry_pending(s, outcome)).await,
        // A success that names no transaction, or not one of ours, still says money may
        // move: the chain decides, never a fresh 402.
        Ok(outcome) if outcome.success => {
            let network = outcome.response.get("network").and_then(Value::as_str);
            tracing::warn!(transaction = ?outcome.transaction, ?network, "settle succeeded naming no transaction hash on our network: following the chain");
            None
        }
        Ok(outcome) if outcome.transaction.is_none() => {
            return Box::pin(before_broadcast(s, outcome)).await;
        }
        Ok(outcome) => {
            tracing::warn!(reason = ?outcome.error_reason, transaction = ?outcome.transaction, "settle failed naming a transaction: following it");
            outcome.transaction
        }
        Err(error) => {
            tracing::warn!(%error, "settle outcome unknown: following the chain");
            None
        }
    };
    Box::pin(follow(s, hint)).await
}

/// Whether a success names a transaction hash, on our network when it names one (x402 lets
/// the facilitator leave `network` out): the receipt and the seal state both.
fn names_our_transfer(outcome: &SettleOutcome, network: &str) -> bool {
    let is_hash = outcome
        .transaction
        .as_deref()
        .is_some_and(|t| t.len() == 66 && t.parse::<B256>().is_ok());
    let said = outcome.response.get("network").and_then(Value::as_str);
    is_hash && said.is_none_or(|said| said.is_empty() || said == network)
}

/// x402's pending answer: the reference servers' one retry with the identical payload, which
/// a facilitator that keeps pending settlements answers from the same broadcast. A success
/// is still proven on chain (we read it anyway).
async fn retry_pending(s: &Settling<'_>, first: SettleOutcome) -> Option<String> {
    tracing::info!(transaction = ?first.transaction, "settlement pending: asking /settle once more");
    match s.ask().await {
        Ok(again) if again.transaction.is_some() => again.transaction,
        _ => first.transaction,
    }
}

/// The facilitator's refusals that come from its settle-time re-verification, before any
/// transaction is sent (x402 v2 §9 and the reference facilitators' codes). Any other failure
/// naming no transaction may follow a broadcast whose answer was lost: the reference
/// facilitator answers `invalid_exact_evm_transaction_failed` with an empty `transaction`
/// when its `writeContract` call throws, and a node may have taken the transaction by then.
/// `invalid_exact_evm_nonce_already_used` is not here: it says the nonce is used on the
/// facilitator's node, which may be ahead of ours, so the chain decides. Nor is
/// `…_valid_before`: the facilitator's clock is not the chain's, and the authorization may
/// still run until a block reaches `validBefore` (or have run before a check of the window
/// came first). The call's deadline comes before that block, so the buyer hears pending, and
/// their resend (or the reconcile pass) hears the chain's verdict once it is past.
const REFUSED_BEFORE_BROADCAST: &[&str] = &[
    "invalid_exact_evm_payload_signature",
    "invalid_exact_evm_signature",
    "invalid_exact_evm_payload_authorization_valid_after",
    "invalid_exact_evm_payload_authorization_value",
    "invalid_exact_evm_authorization_value",
    "invalid_exact_evm_payload_recipient_mismatch",
    "invalid_exact_evm_recipient_mismatch",
    "invalid_exact_evm_network_mismatch",
    "invalid_exact_evm_scheme",
    "invalid_exact_evm_token_name_mismatch",
    "invalid_exact_evm_token_version_mismatch",
    "invalid_exact_evm_transaction_simulation_failed",
    "invalid_network",
    "invalid_payload",
    "invalid_payment_requirements",
    "invalid_scheme",
    "unsupported_scheme",
];

/// The refusals that say the payer's funds are gone. A facilitator may check the balance
/// before the nonce, and the funds also leave when this very authorization runs: our node
/// must show both the nonce unused and the balance short at one block, or it has not seen
/// what the facilitator saw (it lags, or the facilitator is wrong) and the chain decides.
const REFUSED_FOR_FUNDS: &[&str] = &[
    "insufficient_funds",
    "invalid_exact_evm_insufficient_balance",
    "invalid_exact_evm_insufficient_funds",
];

/// A failure naming no transaction: unpaid now if the facilitator refused before
/// broadcasting and the chain shows the authorization unused; any other such failure is
/// followed on chain like a timeout, so a lost broadcast is never answered with a fresh 402.
/// So is a refusal that answered a resent `/settle`: it speaks for the second sending only,
/// and the first, whose answer was lost, may have broadcast.
async fn before_broadcast(s: &Settling<'_>, outcome: SettleOutcome) -> Settlement {
    let reason = outcome
        .error_reason
        .clone()
        .unwrap_or_else(|| SETTLEMENT_FAILED.into());
    let for_funds = REFUSED_FOR_FUNDS.contains(&reason.as_str());
    if !for_funds && !REFUSED_BEFORE_BROADCAST.contains(&reason.as_str()) {
        tracing::warn!(%reason, "settle failed naming no transaction, for a reason that may follow a broadcast: following the chain");
        return follow(s, None).await;
    }
    if outcome.after_resend {
        tracing::warn!(%reason, "settle refused a resent request, whose first sending went unanswered: following the chain");
        return follow(s, None).await;
    }
    let Some(chain) = s.chain else {
        return pending(
            None,
            format!("settle failed ({reason}); no trusted chain reader"),
        );
    };
    let until = wait_ends(s);
    loop {
        let reading = read_refused(chain, &s.payment, for_funds, until);
        let evidence = match tokio::time::timeout_at(s.deadline, reading).await {
            Ok(Refused::Unpaid {
                evidence,
                payer_fault,
            }) => {
                return Settlement::Unpaid {
                    evidence: format!("settle failed before broadcasting ({reason}); {evidence}"),
                    payer_fault,
                    reason,
                    response: Some(outcome.response),
                };
            }
            Ok(Refused::Used) => return follow_until(s, None, until).await,
            // Our node may be a block behind the facilitator's, or a read failed: asked again.
            Ok(Refused::FundsStillSeen(evidence) | Refused::Unreadable(evidence)) => evidence,
            Err(_) => "the chain did not answer before the call's deadline".to_string(),
        };
        if Instant::now() + POLL_INTERVAL >= until {
            tracing::warn!(%reason, %evidence, "settle refused before broadcasting, and the chain did not confirm it unused in time: pending");
            return pending(
                None,
                format!("settle refused before broadcasting ({reason}); {evidence}"),
            );
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// What our node shows of an authorization the facilitator refused before broadcasting.
enum Refused {
    /// Unused at one block (and, for a refusal for funds, the balance short there): unpaid.
    Unpaid {
        /// What was read.
        evidence: String,
        /// The payer moved the funds elsewhere: they are struck.
        payer_fault: bool,
    },
    /// A refusal for funds, unused, but our node still shows the funds: it may not have seen
    /// what the facilitator saw yet.
    FundsStillSeen(String),
    /// Used: the chain decides what spent it.
    Used,
    /// A read failed (what failed).
    Unreadable(String),
}

/// Reads the refused authorization's state, and for a refusal for funds the payer's
/// balance, at one pinned block. `until`: how long a log index behind that block is waited for.
async fn read_refused(
    chain: &AuthorizationReader,
    payment: &Payment,
    for_funds: bool,
    until: Instant,
) -> Refused {
    let terms = &payment.terms;
    let state = match chain.state(terms).await {
        Ok(state) if state.used => return Refused::Used,
        Ok(state) => state,
        Err(error) => return Refused::Unreadable(error.to_string()),
    };
    let unused = format!("authorizationState unused at block {}", state.block);
    if !for_funds {
        return Refused::Unpaid {
            evidence: unused,
            payer_fault: false,
        };
    }
    match chain.payer_balance(terms, state.block).await {
        Ok(balance) if balance < terms.value => {
            let short = format!(
                "{unused}, where the payer holds {balance} of the {} due",
                terms.value
            );
            whose_shortfall(chain, payment, state.block, balance, short, until).await
        }
        Ok(balance) => Refused::FundsStillSeen(format!(
            "{unused}, where our node still shows the payer's balance {balance} of the {} due",
            terms.value
        )),
        Err(error) => Refused::Unreadable(format!("{unused}; {error}")),
    }
}

/// Whose doing a confirmed shortfall is: the payer's (struck), unless what they paid us from
/// a few blocks before this call's `/verify` to `block`, added back, covers this payment.
/// Then our own charge took the funds (another call of theirs, settled first), and being
/// struck for an hour for it would be wrong. A strike is an accusation, so the search must
/// account for the payer's balance at `block` to the unit ([`Flows::account_for`]), with at
/// least the shortfall leaving them (`/verify` saw the whole amount). Logs
/// that fall short come from a log index behind the block: they are asked again until `until`.
/// A search that never accounts for it, fails, or runs past `until` strikes no one.
async fn whose_shortfall(
    chain: &AuthorizationReader,
    payment: &Payment,
    block: u64,
    balance: U256,
    short: String,
    until: Instant,
) -> Refused {
    let (evidence, payer_fault) = match judge_shortfall(chain, payment, block, balance, until).await
    {
        Ok(Verdict::OurCharge(to_us)) => (
            format!(
                "{short}; it paid us {to_us} since just before this call's /verify, so our own charge took the funds: not struck"
            ),
            false,
        ),
        Ok(Verdict::Payer(flows)) => (
            format!(
                "{short}; it paid us {} meanwhile, of {} that left it",
                flows.to_us, flows.sent
            ),
            true,
        ),
        Err(why) => (format!("{short}; {why}: not struck"), false),
    };
    Refused::Unpaid {
        evidence,
        payer_fault,
    }
}

/// Whose shortfall it is, when the chain can tell.
enum Verdict {
    /// What the payer paid us meanwhile covers it.
    OurCharge(U256),
    /// The funds went elsewhere.
    Payer(Flows),
}

/// The search of [`whose_shortfall`]; `Err` says why no one can be blamed.
async fn judge_shortfall(
    chain: &AuthorizationReader,
    payment: &Payment,
    block: u64,
    balance: U256,
    until: Instant,
) -> Result<Verdict, String> {
    let terms = &payment.terms;
    let late = || "where its funds went was not read by the wait's end".to_string();
    let unreadable = |error| format!("where its funds went is unreadable ({error})");
    let start =
        tokio::time::timeout_at(until, chain.flow_start(terms, payment.presented_at, block))
            .await
            .map_err(|_| late())?
            .map_err(unreadable)?;
    let short_of = |start: u64| {
        format!(
            "the node's logs from block {start} to {block} do not account for its balance (a log index behind the block answers [])"
        )
    };
    let mut fell_short = false;
    loop {
        let flows = match tokio::time::timeout_at(until, chain.flows(terms, &start, block)).await {
            Ok(read) => read.map_err(unreadable)?,
            // A search cut by the wait after one that fell short: that is what was learnt.
            Err(_) if fell_short => return Err(short_of(start.block)),
            Err(_) => return Err(late()),
        };
        // `/verify` saw the whole amount, so at least the shortfall left the payer since: a
        // log index that stopped before a deposit and what followed it can still balance.
        let shortfall = terms.value.saturating_sub(balance);
        if flows.account_for(balance) && flows.sent >= shortfall {
            return Ok(if balance.saturating_add(flows.to_us) >= terms.value {
                Verdict::OurCharge(flows.to_us)
            } else {
                Verdict::Payer(flows)
            });
        }
        if Instant::now() + POLL_INTERVAL >= until {
            return Err(short_of(start.block));
        }
        fell_short = true;
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// When following ends: the wait, or the call's deadline if sooner.
fn wait_ends(s: &Settling<'_>) -> Instant {
    s.deadline.min(Instant::now() + s.wait)
}

/// Polls the chain until a definite finding, the wait's end or the deadline.
async fn follow(s: &Settling<'_>, hint: Option<String>) -> Settlement {
    follow_until(s, hint, wait_ends(s)).await
}

/// [`follow`] until `until` (a wait already begun).
async fn follow_until(s: &Settling<'_>, hint: Option<String>, until: Instant) -> Settlement {
    let Some(chain) = s.chain else {
        return pending(
            hint,
            "no trusted chain reader: the outcome is left to reconcile".into(),
        );
    };
    loop {
        // One reading is several RPC reads, each with its own timeout: the whole of it is held
        // to the deadline too, so a hanging node cannot keep the buyer past it.
        let reading = tokio::time::timeout_at(s.deadline, find(chain, &s.payment, hint.as_deref()));
        let Ok(finding) = reading.await else {
            return pending(
                hint,
                "the chain did not answer before the call's deadline".into(),
            );
        };
        match finding {
            Finding::Paid {
                transaction,
                transfer_log_index,
                evidence,
            } => {
                return Settlement::Paid {
                    transaction,
                    transfer_log_index: Some(transfer_log_index),
                    response: None,
                    evidence: Some(evidence),
                };
            }
            Finding::Burned {
                transaction,
                evidence,
            } => {
                return Settlement::Burned {
                    transaction,
                    evidence,
                };
            }
            Finding::Unpaid { evidence } => {
                return Settlement::Unpaid {
                    reason: SETTLEMENT_FAILED.into(),
                    response: None,
                    evidence,
                    payer_fault: false,
                };
            }
            Finding::Unknown { evidence } => {
                if Instant::now() + POLL_INTERVAL >= until {
                    return pending(hint, evidence);
                }
            }
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Recent chain readings about pending rows, so resends cannot turn into RPC load.
#[derive(Default)]
pub(crate) struct PendingReads {
    findings: Mutex<HashMap<i64, (Instant, Finding)>>,
    /// One reading at a time per row.
    reading: RowLocks,
}

impl PendingReads {
    /// What the chain says about a row's payment, read at most once per
    /// [`PENDING_READ_TTL`] per row, within `budget`: a reading still going then is unknown
    /// (a resend of a long-past payment whose event search spans many windows leaves it to
    /// the reconcile pass, which has no deadline, rather than hold the buyer's request).
    pub(crate) async fn find(
        &self,
        chain: &AuthorizationReader,
        row: &AttemptRow,
        payment: &Payment,
        budget: Duration,
    ) -> Finding {
        if let Some(finding) = self.recent(row.id) {
            return finding;
        }
        let _one_reading = self.reading.lock(row.id).await;
        if let Some(finding) = self.recent(row.id) {
            return finding;
        }
        let reading = find(chain, payment, row.transaction_hash.as_deref());
        let finding = tokio::time::timeout(budget, reading)
            .await
            .unwrap_or_else(|_| {
                tracing::warn!(attempt = row.id, budget_ms = budget.as_millis(), "a resend's chain reading did not finish within its budget; the outcome stays unknown");
                unknown(vec![format!(
                    "the chain reading did not finish within {} ms; a reconcile decides the row",
                    budget.as_millis()
                )])
            });
        if let Ok(mut findings) = self.findings.lock() {
            findings.retain(|_, (at, _)| at.elapsed() < PENDING_READ_TTL);
            findings.insert(row.id, (Instant::now(), finding.clone()));
        }
        finding
    }

    fn recent(&self, id: i64) -> Option<Finding> {
        let findings = self.findings.lock().ok()?;
        let (at, finding) = findings.get(&id)?;
        (at.elapsed() < PENDING_READ_TTL).then(|| finding.clone())
    }
}

/// A SettleResponse of ours (when the facilitator's is not the answer), as the
/// PAYMENT-RESPONSE header carries it: base64 of JSON.
pub(crate) fn our_settle_response(
    network: &str,
    payer: &str,
    success: bool,
    reason: Option<&str>,
    transaction: Option<&str>,
) -> String {
    let mut response = serde_json::json!({
        "success": success,
        "transaction": transaction.unwrap_or_default(),
        "network": network,
        "payer": payer,
    });
    if let Some(reason) = reason {
        response["errorReason"] = serde_json::json!(reason);
    }
    encoded(&response)
}

/// A SettleResponse as the PAYMENT-RESPONSE header carries it.
pub(crate) fn encoded(response: &Value) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .encode(serde_json::to_vec(response).unwrap_or_default())
}

fn pending(transaction: Option<String>, evidence: String) -> Settlement {
    Settlement::Pending {
        transaction,
        evidence,
    }
}
