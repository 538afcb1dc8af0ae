// "Open on a phone": a button in the header shows a QR code of this dashboard's address (qr.js draws it).
//
// The address is the page's own, without query or fragment. A page opened by an address a phone cannot reach
// (localhost, 127.x, ::1) shows the node's LAN addresses instead (GET /api/v1/node's lanAddresses): the code is the
// first, the others are links. On plain HTTP one line says what a phone misses and how to get HTTPS.

import { encode, toSvg } from './qr.js';

const LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i;

/** The address to show: the page's origin and path. */
export function dashboardAddress(location = window.location) {
  return `${location.origin}${location.pathname}`;
}

/** The dashboard's address on the LAN address `host` (an IPv6 one in brackets), same scheme, port and path. */
export function lanAddress(host, location = window.location) {
  const name = host.includes(':') ? `[${host}]` : host;
  return `${location.protocol}//${name}${location.port ? `:${location.port}` : ''}${location.pathname}`;
}

export function initPhoneLink() {
  const button = document.querySelector('[data-testid="qr-toggle"]');
  const panel = document.querySelector('[data-testid="qr-panel"]');
  const figure = panel.querySelector('[data-testid="qr-figure"]');
  const url = panel.querySelector('[data-testid="qr-url"]');
  const note = panel.querySelector('[data-testid="qr-note"]');
  const close = panel.querySelector('[data-testid="qr-close"]');
  const others = panel.querySelector('[data-testid="qr-others"]');
  const https = panel.querySelector('[data-testid="qr-https"]');
  let lan = []; // the node's LAN addresses, asked for when the page is on a loopback address

  // Asked once at start and again whenever the panel opens; the open panel is drawn again only when the list
  // changed, so the code a camera is reading is not swapped for an identical one.
  async function loadLanAddresses() {
    let found;
    try {
      const response = await fetch(new URL('api/v1/node', document.baseURI), { cache: 'no-store' });
      const node = response.ok ? await response.json() : null;
      found = node && Array.isArray(node.lanAddresses) ? node.lanAddresses.filter((a) => typeof a === 'string') : [];
    } catch {
      found = []; // the note says to open the page by the node's address
    }
    const changed = found.join(' ') !== lan.join(' ');
    lan = found;
    panel.dataset.lanChecked = 'true';
    if (changed && !panel.hidden) render();
  }

  function render() {
    const loopback = LOOPBACK.test(window.location.hostname);
    const addresses = loopback ? lan.map((host) => lanAddress(host)) : [];
    const address = addresses[0] || dashboardAddress();
    let code;
    try {
      code = encode(address, { level: 'M' });
    } catch {
      code = null; // longer than version 10 holds (over 213 bytes): the address is shown as text only
    }
    figure.replaceChildren();
    if (code) {
      const svg = toSvg(code, { label: `QR code of ${address}` });
      svg.dataset.testid = 'qr-code';
      svg.dataset.version = String(code.version);
      svg.dataset.mask = String(code.mask);
      figure.append(svg);
    }
    url.textContent = address;
    url.href = address;
    note.hidden = !loopback || addresses.length > 0;
    others.replaceChildren(
      ...addresses.slice(1).map((other) => {
        const item = document.createElement('li');
        const link = document.createElement('a');
        link.className = 'mono wrap';
        link.href = other;
        link.textContent = other;
        link.dataset.testid = 'qr-other';
        item.append(link);
        return item;
      }),
    );
    others.hidden = addresses.length < 2;
    https.hidden = window.location.protocol !== 'http:';
  }

  function show(open) {
    if (open) render();
    if (open && LOOPBACK.test(window.location.hostname)) loadLanAddresses();
    panel.hidden = !open;
    button.setAttribute('aria-expanded', open ? 'true' : 'false');
    if (open) close.focus();
  }

  if (LOOPBACK.test(window.location.hostname)) loadLanAddresses();
  button.addEventListener('click', () => show(panel.hidden));
  close.addEventListener('click', () => {
    show(false);
    button.focus();
  });
  panel.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') {
      show(false);
      button.focus();
    }
  });
}
