// "Open on a phone": a button in the header shows a QR code of this dashboard's address (qr.js draws it).
//
// The address is the page's own, without query or fragment. An address a phone cannot reach (localhost,
// 127.x, ::1) gets a note saying to open the dashboard by the node's network address first.

import { encode, toSvg } from './qr.js';

const LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i;

/** The address to show: the page's origin and path. */
export function dashboardAddress(location = window.location) {
  return `${location.origin}${location.pathname}`;
}

export function initPhoneLink() {
  const button = document.querySelector('[data-testid="qr-toggle"]');
  const panel = document.querySelector('[data-testid="qr-panel"]');
  const figure = panel.querySelector('[data-testid="qr-figure"]');
  const url = panel.querySelector('[data-testid="qr-url"]');
  const note = panel.querySelector('[data-testid="qr-note"]');
  const close = panel.querySelector('[data-testid="qr-close"]');

  function render() {
    const address = dashboardAddress();
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
    note.hidden = !LOOPBACK.test(window.location.hostname);
  }

  function show(open) {
    if (open) render();
    panel.hidden = !open;
    button.setAttribute('aria-expanded', open ? 'true' : 'false');
    if (open) close.focus();
  }

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
