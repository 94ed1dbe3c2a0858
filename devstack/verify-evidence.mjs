#!/usr/bin/env node
// The official offer-and-receipt verification (@x402/extensions) of factomat's signed offers
// and receipts, and jose's of its evidence seals. Offers come from real unpaid calls: each
// 402's PAYMENT-REQUIRED header is decoded as the official client does, its body parsed, and
// every offer verified with the key its kid names, the library resolving our did:web itself
// (over http for 127.0.0.1, as did:web allows). Receipts are PAYMENT-RESPONSE values; seals
// are verified with the did.json key their kid names.
// Prints ONE line of JSON: {offers: [...], receipts: [...], seals: [...]}.
//
//   node devstack/verify-evidence.mjs INPUT.json
//   INPUT: {"requests": [{"url", "body"}], "receipts": ["<PAYMENT-RESPONSE>"],
//           "seals": ["<JWS>"], "did_document": "<url>"}
import { readFileSync } from 'node:fs';
import { decodePaymentRequiredHeader } from '@x402/core/http';
import {
  canonicalize,
  decodeSignedOffers,
  extractJWSPayload,
  extractOffersFromPaymentRequired,
  extractReceiptFromResponse,
  findAcceptsObjectFromSignedOffer,
  verifyOfferSignatureJWS,
  verifyReceiptSignatureJWS,
} from '@x402/extensions/offer-receipt';
import { base64url, compactVerify, decodeProtectedHeader, importJWK } from 'jose';

const message = (error) => (error instanceof Error ? error.message : String(error));

// The signed bytes are JCS: the official canonicalize() of the payload gives them back.
function payloadIsCanonical(jws) {
  const text = new TextDecoder().decode(base64url.decode(jws.split('.')[1]));
  return canonicalize(JSON.parse(text)) === text;
}

async function checkOffers(paymentRequired) {
  const offers = extractOffersFromPaymentRequired(paymentRequired);
  const checked = [];
  for (const decoded of decodeSignedOffers(offers)) {
    const entry = { payload: null, matches_accepts: false, canonical: false, error: null };
    try {
      entry.payload = await verifyOfferSignatureJWS(decoded.signedOffer);
      entry.matches_accepts = Boolean(findAcceptsObjectFromSignedOffer(decoded, paymentRequired.accepts));
      entry.canonical = payloadIsCanonical(decoded.signedOffer.signature);
      entry.resource_matches = entry.payload.resourceUrl === paymentRequired.resource?.url;
    } catch (error) {
      entry.error = message(error);
    }
    checked.push(entry);
  }
  return checked;
}

async function offersOf({ url, body }) {
  const out = { url, status: null, header: [], body: [], error: null };
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(15000),
    });
    out.status = response.status;
    const header = response.headers.get('PAYMENT-REQUIRED');
    out.header = header ? await checkOffers(decodePaymentRequiredHeader(header)) : [];
    out.body = await checkOffers(await response.json());
  } catch (error) {
    out.error = message(error);
  }
  return out;
}

async function receiptOf(paymentResponse) {
  const out = { payload: null, canonical: false, error: null };
  try {
    const response = new Response(null, { headers: { 'PAYMENT-RESPONSE': paymentResponse } });
    const receipt = extractReceiptFromResponse(response);
    if (!receipt) throw new Error('no receipt in PAYMENT-RESPONSE');
    out.payload = await verifyReceiptSignatureJWS(receipt);
    out.canonical = payloadIsCanonical(receipt.signature);
  } catch (error) {
    out.error = message(error);
  }
  return out;
}

async function sealOf(jws, document) {
  const out = { payload: null, kid: null, error: null };
  try {
    const { kid } = decodeProtectedHeader(jws);
    out.kid = kid;
    if (!document.assertionMethod.includes(kid)) throw new Error(`${kid} is no assertion method`);
    const method = document.verificationMethod.find((m) => m.id === kid);
    const key = await importJWK(method.publicKeyJwk, 'EdDSA');
    const { payload } = await compactVerify(jws, key, { algorithms: ['EdDSA'] });
    out.payload = JSON.parse(new TextDecoder().decode(payload));
    out.unverified_payload_agrees = JSON.stringify(extractJWSPayload(jws)) === JSON.stringify(out.payload);
  } catch (error) {
    out.error = message(error);
  }
  return out;
}

const input = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const document = input.did_document
  ? await (await fetch(input.did_document, { signal: AbortSignal.timeout(15000) })).json()
  : null;
const result = {
  offers: await Promise.all((input.requests ?? []).map(offersOf)),
  receipts: await Promise.all((input.receipts ?? []).map(receiptOf)),
  seals: await Promise.all((input.seals ?? []).map((jws) => sealOf(jws, document))),
};
console.log(JSON.stringify(result));
