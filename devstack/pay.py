#!/usr/bin/env python3
# Make ONE paid HTTP call with the official x402 v2 Python client (PyPI `x402`: httpx transport +
# the exact EVM client scheme with an eth-account signer) and print ONE line of JSON to stdout,
# the same fields as devstack/pay.mjs:
#   {status, headers:{"payment-response","payment-required"}, body, payment_response,
#    payment_required, payment_signature, payment_payload, requests, signed, signatures_sent,
#    elapsed_ms, error, client}
# signed is how many EIP-712 payment signatures the client produced; signatures_sent how many
# requests carried a PAYMENT-SIGNATURE (payment_signatures lists them when there is more than one).
#
#   .tools/venv/bin/python devstack/pay.py --url URL [--method POST] [--body JSON] [--header 'K: V']...
#                                          [--key 0x..] [--state PATH] [--no-spend-controls] [--timeout-ms 30000]
# --key defaults to the state file's buyer_private_key (state: --state, else $FACTOMAT_DEVSTACK_STATE,
# else .devstack/state.json at the repository root). Exit code 0 when the client returned a response,
# 1 when it raised (error set; status/headers describe the last response seen).
import argparse
import asyncio
import base64
import json
import os
import sys
import time
from pathlib import Path

import httpx
from eth_account import Account
from x402 import x402Client, x402ClientConfig, SchemeRegistration
from x402.http.clients.httpx import x402AsyncTransport
from x402.mechanisms.evm.exact import ExactEvmClientScheme
from x402.mechanisms.evm.signers import EthAccountSigner

DEFAULT_STATE = Path(__file__).resolve().parent.parent / ".devstack" / "state.json"

out = {
    "status": None,
    "headers": {"payment-response": None, "payment-required": None},
    "body": None,
    "payment_response": None,
    "payment_required": None,
    "payment_signature": None,
    "payment_payload": None,
    "requests": 0,
    "signed": 0,
    "signatures_sent": 0,
    "elapsed_ms": None,
    "error": None,
    "client": "x402 (PyPI)",
}
signatures = []
last = {}


def decode_b64_json(value):
    if not value:
        return None
    try:
        return json.loads(base64.b64decode(value))
    except Exception:
        return None


class CountingSigner(EthAccountSigner):
    """The official eth-account signer, counting the payment signatures it produces."""

    def sign_typed_data(self, *args, **kwargs):
        out["signed"] += 1
        return super().sign_typed_data(*args, **kwargs)


class CapturingTransport(httpx.AsyncBaseTransport):
    """The transport under the client's payment transport: sees every request it sends."""

    def __init__(self):
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request):
        out["requests"] += 1
        signature = request.headers.get("payment-signature")
        if signature is not None:
            signatures.append(signature)
        response = await self._inner.handle_async_request(request)
        last["status"] = response.status_code
        last["headers"] = response.headers
        return response

    async def aclose(self):
        await self._inner.aclose()


def parse_args():
    p = argparse.ArgumentParser(description="one paid call with the official x402 Python client")
    p.add_argument("--url", required=True)
    p.add_argument("--method", default="POST")
    p.add_argument("--body")
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--key")
    p.add_argument("--state", default=os.environ.get("FACTOMAT_DEVSTACK_STATE", str(DEFAULT_STATE)))
    p.add_argument("--no-spend-controls", action="store_true")
    p.add_argument("--timeout-ms", default="30000")
    return p.parse_args()


async def main():
    opt = parse_args()
    key = opt.key
    if not key:
        state = Path(opt.state).resolve()
        if not state.exists():
            raise RuntimeError(f"no --key and no state file at {state}")
        key = json.loads(state.read_text())["buyer_private_key"]
    signer = CountingSigner(Account.from_key(key))
    config = x402ClientConfig(
        schemes=[SchemeRegistration(network="eip155:*", client=ExactEvmClientScheme(signer))],
        spend_controls=False if opt.no_spend_controls else None,
    )
    client = x402Client.from_config(config)
    headers = {}
    for h in opt.header:
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            raise RuntimeError(f"bad --header {h!r} (want 'Name: value')")
        headers[name.strip()] = value.strip()
    content = None
    if opt.body is not None:
        headers.setdefault("content-type", "application/json")
        content = opt.body.encode()
    timeout = float(opt.timeout_ms) / 1000
    transport = x402AsyncTransport(client, CapturingTransport())
    try:
        async with httpx.AsyncClient(transport=transport, timeout=timeout) as http:
            response = await http.request(opt.method.upper(), opt.url, headers=headers, content=content)
    except Exception:
        if last:
            out["status"] = last["status"]
            out["headers"]["payment-response"] = last["headers"].get("payment-response")
            out["headers"]["payment-required"] = last["headers"].get("payment-required")
            out["payment_required"] = decode_b64_json(out["headers"]["payment-required"])
        raise
    out["status"] = response.status_code
    out["headers"]["payment-response"] = response.headers.get("payment-response")
    out["headers"]["payment-required"] = response.headers.get("payment-required")
    out["payment_response"] = decode_b64_json(out["headers"]["payment-response"])
    out["payment_required"] = decode_b64_json(out["headers"]["payment-required"])
    text = response.text
    try:
        out["body"] = None if text == "" else json.loads(text)
    except ValueError:
        out["body"] = text


def run():
    t0 = time.monotonic()
    code = 0
    try:
        asyncio.run(main())
    except SystemExit:
        raise
    except BaseException as e:  # report every failure as one JSON line
        cause = f": {e.__cause__}" if e.__cause__ else ""
        out["error"] = f"{type(e).__name__}: {e}{cause}"
        code = 1
    out["signatures_sent"] = len(signatures)
    out["payment_signature"] = signatures[-1] if signatures else None
    if len(signatures) > 1:
        out["payment_signatures"] = signatures
    out["payment_payload"] = decode_b64_json(out["payment_signature"])
    out["elapsed_ms"] = round((time.monotonic() - t0) * 1000)
    sys.stdout.write(json.dumps(out) + "\n")
    sys.exit(code)


if __name__ == "__main__":
    run()
