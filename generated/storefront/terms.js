// "See the payment terms": sends the page's request example unpaid and shows the terms of the
// 402 answer, read from its JSON body (the same PaymentRequired object the PAYMENT-REQUIRED
// header carries). It pays nothing; the server runs no observation for an unpaid call.
'use strict';

(function () {
  const button = document.getElementById('terms-button');
  const output = document.getElementById('terms-output');
  if (!button || !output) return;
  button.hidden = false;

  // Atomic units to a decimal string, without floating point.
  function formatUnits(atomic, decimals) {
    if (!/^[0-9]+$/.test(atomic)) return null;
    const padded = atomic.padStart(decimals + 1, '0');
    const whole = padded.slice(0, padded.length - decimals);
    const fraction = padded.slice(padded.length - decimals).replace(/0+$/, '');
    return fraction ? `${whole}.${fraction}` : whole;
  }

  function paragraph(text, className) {
    const p = document.createElement('p');
    p.textContent = text;
    if (className) p.className = className;
    return p;
  }

  function term(list, name, label, value) {
    const dt = document.createElement('dt');
    dt.textContent = label;
    const dd = document.createElement('dd');
    const code = document.createElement('code');
    code.textContent = value == null ? '—' : String(value);
    dd.dataset.term = name;
    dd.appendChild(code);
    list.append(dt, dd);
  }

  function showTerms(required) {
    const accepts = Array.isArray(required.accepts) ? required.accepts : [];
    const decimals = Number(button.dataset.decimals);
    output.replaceChildren(
      paragraph(`402 Payment Required: ${accepts.length} way(s) to pay. Nothing was charged.`, 'ok'),
    );
    for (const option of accepts) {
      const list = document.createElement('dl');
      list.className = 'facts';
      const amount = formatUnits(String(option.amount), decimals);
      const known = String(option.asset).toLowerCase() === button.dataset.asset.toLowerCase();
      const readable = amount !== null && known ? `${amount} ${button.dataset.symbol}` : null;
      term(list, 'amount', 'Amount (atomic units)', option.amount);
      if (readable) term(list, 'amount-readable', 'Amount', readable);
      term(list, 'asset', 'Asset', option.asset);
      term(list, 'network', 'Network', option.network);
      term(list, 'payTo', 'Pay to', option.payTo);
      term(list, 'scheme', 'Scheme', option.scheme);
      term(list, 'maxTimeoutSeconds', 'Authorization valid for (s)', option.maxTimeoutSeconds);
      output.appendChild(list);
    }
    const resource = required.resource && required.resource.url;
    if (resource) output.appendChild(paragraph(`Resource: ${resource} (x402 version ${required.x402Version}).`));
  }

  function showProblem(status, body) {
    const error = body && body.error;
    const detail = error && error.message ? `: ${error.message}` : '';
    output.replaceChildren(paragraph(`The server answered ${status}${detail}`, 'problem'));
  }

  button.addEventListener('click', async () => {
    button.disabled = true;
    output.replaceChildren(paragraph('Asking the server for its terms…'));
    try {
      const response = await fetch(button.dataset.resource, {
        method: button.dataset.method,
        headers: { 'content-type': 'application/json' },
        body: button.dataset.body,
      });
      const body = await response.json().catch(() => null);
      if (response.status === 402 && body && Array.isArray(body.accepts)) {
        showTerms(body);
      } else {
        showProblem(response.status, body);
      }
    } catch (error) {
      output.replaceChildren(paragraph(`The request failed: ${error.message}`, 'problem'));
    } finally {
      button.disabled = false;
    }
  });
})();
