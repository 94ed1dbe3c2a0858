#!/usr/bin/env node
// Check 402 bodies with the official bazaar code of @x402/extensions: the declaration
// validates against its own schema (validateDiscoveryExtension) and the protocol's rules
// (validateDiscoveryExtensionSpec), extractDiscoveryInfo finds it in a payment payload that
// carries it, and the listing metadata on `resource` survives the facilitator's sanitizer.
// Reads a JSON array of PaymentRequired bodies on stdin; prints ONE line of JSON:
// {results: [{url, valid, errors, spec, extracted, serviceName, tags, iconUrl}]}.
import {
  validateDiscoveryExtension,
  validateDiscoveryExtensionSpec,
  extractDiscoveryInfo,
  sanitizeResourceServiceMetadata,
} from '@x402/extensions/bazaar';

function checkOne(required) {
  const bazaar = required?.extensions?.bazaar;
  const own = validateDiscoveryExtension(bazaar);
  const spec = validateDiscoveryExtensionSpec(bazaar);
  const payload = {
    x402Version: 2,
    resource: required.resource,
    accepted: required.accepts[0],
    payload: {},
    extensions: required.extensions,
  };
  let extracted = null;
  try {
    extracted = extractDiscoveryInfo(payload, required.accepts[0], true);
  } catch (e) {
    extracted = { error: String(e?.message ?? e) };
  }
  const metadata = sanitizeResourceServiceMetadata(required.resource);
  return {
    url: required?.resource?.url,
    valid: own.valid,
    errors: own.errors ?? [],
    spec: spec.valid,
    specErrors: spec.errors ?? [],
    extracted,
    serviceName: metadata.serviceName ?? null,
    tags: metadata.tags ?? null,
    iconUrl: metadata.iconUrl ?? null,
  };
}

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => (input += chunk));
process.stdin.on('end', () => {
  try {
    const results = JSON.parse(input).map(checkOne);
    console.log(JSON.stringify({ results }));
  } catch (e) {
    console.log(JSON.stringify({ results: [], error: String(e?.message ?? e) }));
    process.exit(1);
  }
});
