// Arrivals you notice: what came in while you were looking elsewhere.
//
// One shared place (an ES module is a singleton) for:
//   - the page title's count, "(2) lab-b · meshgate": offers waiting for an answer plus files that arrived
//     since the Files view was last open (each feature reports its own number with `count`);
//   - a polite live region (data-testid="arrivals-live") in which each arrival is said once, for screen readers
//     and for anyone looking at another tab of the dashboard.
// The node's name is the title's base (`setBase`, from the node panel).
// `arrive` also alerts the person as they chose in alerts.js (a system notification, a chime).

import { alertArrival } from './alerts.js';

const counts = new Map(); // source → number
let base = 'meshgate';

function total() {
  let sum = 0;
  for (const value of counts.values()) sum += value;
  return sum;
}

function renderTitle() {
  const n = total();
  document.title = n > 0 ? `(${n}) ${base}` : base;
}

/** The title without a count: "<node name> · meshgate". */
export function setBase(title) {
  base = title;
  renderTitle();
}

/** Sets how many unseen arrivals `source` ("offers", "files") has. */
export function count(source, n) {
  counts.set(source, Math.max(0, n | 0));
  renderTitle();
}

/** Says `text` once in the live region (a repeat of the same words is said again). */
export function announce(text) {
  const region = document.querySelector('[data-testid="arrivals-live"]');
  if (!region || !text) return;
  const line = document.createElement('p');
  line.textContent = text;
  region.append(line);
  // Keep the region short: screen readers only read what is added.
  while (region.childElementCount > 5) region.firstElementChild.remove();
}

/** An arrival (offer, invitation, incoming file, chat mention): said in the live region, and alerted. */
export function arrive(text, { tag } = {}) {
  announce(text);
  alertArrival(text, { tag });
}
