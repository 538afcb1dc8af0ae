// meshgate browser page.
//
// A single ES module, no framework and no build step. It talks to the node
// that served it (same origin) through the REST API under /api/v1 and the
// event WebSocket /api/v1/ws. Sections, top to bottom:
//
//   1. Constants and small helpers (DOM, storage, cursors, formatting)
//   2. REST client
//   3. Connection badge (connecting / live / offline / idle)
//   4. Node panel (polled every 10 s, uptime ticking locally)
//   5. Event list (dedupe, newest first, filter, 500-row cap)
//   6. Live socket (WebSocket with resume cursor and exponential backoff)
//   7. Identity (sign in, copy token, switch peer, leave)
//   8. Boot
//
// The views (Nearby, Jobs, Invitations, Sessions, invitation prompts and the
// tab navigation) live in dashboard.js; this module feeds them sign-in, hello
// and every new event.
//
// data-testid hooks (stable; Selenium and other tests rely on them).
// "row" ids repeat once per list item and carry data-* keys noted in brackets;
// query the ids listed under a row inside that row.
//
//   Header       node-name, theme-select, connection-state [data-state], connection-label,
//                connection-retry, retry-now, qr-toggle [aria-expanded], qr-panel, qr-figure,
//                qr-code (svg) [data-version, data-mask], qr-url, qr-note, qr-close
//   Node panel   node-panel, node-info-name, node-id, node-version, node-uptime,
//                node-peer-count, node-open-websockets, node-status
//   Identity     identity-panel, identity-notice, sign-in-form, name-input,
//                name-byte-count, sign-in-error, sign-in-submit, peer-badge,
//                peer-name, peer-id, copy-token, switch-peer, leave,
//                token-fallback, token-field, peer-status, alerts, alerts-notify, alerts-chime
//                (checkboxes, role=switch), alerts-status
//   Tabs         tabs, tab-nearby, tab-jobs, tab-chat (hidden unless the node's
//                OpenAPI has /api/v1/chats), tab-invitations, tab-sessions,
//                tab-events (role=tab, aria-selected), invitations-badge, chat-badge
//   Prompts      invitation-prompts, prompt-list,
//                row invitation-prompt [data-invitation-id, data-state]:
//                  prompt-from, prompt-lead, prompt-context, prompt-code, prompt-expires,
//                  prompt-job (a job offer's prompt-job-due, prompt-job-payment,
//                  prompt-job-notes), prompt-added, prompt-added-text, prompt-show-job,
//                  prompt-error, prompt-accept, prompt-decline, prompt-dismiss
//   Nearby       view-nearby, receive-jobs (checkbox, role=switch),
//                receive-jobs-label, receive-jobs-status, nearby-empty, nearby-list,
//                row nearby-peer [data-peer-id, data-send-state; class is-entering / is-leaving,
//                  is-drop-target, is-over]: nearby-peer-name, nearby-peer-node, nearby-status,
//                  nearby-send-file, nearby-offer-job, nearby-file-input
//                mesh-self, mesh-updated, mesh-empty, mesh-list,
//                row mesh-node [data-node-id, data-state]:
//                  mesh-node-name, mesh-node-address, mesh-node-state,
//                  mesh-node-direction, mesh-node-rtt
//   Jobs         view-jobs, jobs-signed-out, job-form, job-form-title, job-name,
//                job-due, job-payment, job-notes, job-name-error, job-due-error,
//                job-payment-error, job-notes-error, job-form-error, job-submit,
//                job-cancel-edit, job-offer-to, job-offer-to-text, job-offer-to-cancel,
//                jobs-count, jobs-empty, jobs-list,
//                row job-row [data-job-id, data-assigned]:
//                  job-name, job-meta, job-notes, job-status [data-kind],
//                  job-assigned-to, job-received-from, job-send-to (select),
//                  job-send, job-edit, job-delete (press twice), job-error
//                (job-name / job-notes inside a row are the row's texts; the
//                form's inputs are the ones outside any job-row)
//   Chat         view-chat, chat-signed-out, chat-host-form, chat-host-name,
//                chat-host, chat-host-count, chat-host-error, chat-refresh, chat-nearby-empty,
//                chat-nearby-list,
//                row chat-nearby-room [data-chat-id]: chat-nearby-name,
//                  chat-nearby-host, chat-join (Join / Open), chat-join-error
//                chat-rooms-empty, chat-rooms-list,
//                row chat-room-row [data-chat-id, data-joined, data-ended]:
//                  chat-room-row-name, chat-room-row-meta, chat-unread,
//                  chat-open (Open / Rejoin)
//                chat-room [data-chat-id, data-joined, data-ended]: chat-room-name,
//                  chat-room-host, chat-room-status, chat-leave, chat-members,
//                  chat-messages, chat-messages-empty, chat-form, chat-input,
//                  chat-send, chat-error,
//                  row chat-member [data-peer-id, data-role, data-online]: chat-member-name,
//                    chat-member-role
//                  row chat-message [data-message-id, data-seq, data-mine,
//                    data-pending]: chat-message-from, chat-message-body,
//                    chat-message-pending
//   Files        view-files, files-signed-out, files-badge, file-session, file-to, file-drop,
//                file-input, file-error, transfers-empty, transfers-list,
//                row transfer-row [data-transfer-id, data-state, data-direction]: transfer-name,
//                  transfer-meta, transfer-progress, transfer-status, transfer-download,
//                  transfer-cancel, transfer-error
//                shared-files, shared-hint, shared-list, row shared-file,
//                shared-send, shared-discard, shared-error; file-prompts, file-prompt-list,
//                row file-prompt [data-transfer-id]: file-prompt-from, file-prompt-name,
//                  file-prompt-size, file-prompt-expires, file-prompt-error, file-prompt-always,
//                  file-prompt-always-label, file-prompt-accept, file-prompt-decline;
//                transfer-row's transfer-consent, transfer-accept, transfer-decline, transfer-always;
//                always-accept, always-accept-list, row always-accept-row [data-peer-id]:
//                  always-accept-name, always-accept-remove
//   Drafts       inputs that keep a draft carry data-draft=<name>; drafts live in
//                localStorage under meshgate.draft.<peerId>.<name>
//   Invitations  view-invitations, invitations-signed-out, incoming-empty,
//                incoming-list, outgoing-empty, outgoing-list,
//                row invitation-row [data-invitation-id, data-direction, data-state]:
//                  invitation-title, invitation-meta, invitation-state,
//                  invitation-accept, invitation-decline, invitation-cancel,
//                  invitation-error
//   Sessions     view-sessions, sessions-signed-out, session-create,
//                sessions-error, sessions-empty, sessions-list,
//                row session-row [data-session-id]:
//                  session-title, session-meta, session-leave (press twice),
//                  session-members, session-invite-peer (select),
//                  session-invite, session-note, session-messages,
//                  session-form, session-text, session-send, session-error,
//                  row session-member [data-peer-id, data-state]:
//                    session-member-name, session-member-state
//                  row session-message [data-mine]:
//                    session-message-from, session-message-text
//   Events       events-panel (also the Events view), event-count,
//                event-filter, clear-events, events-empty, event-list,
//                row event-row [data-type, data-id]: event-type

import { createDashboard } from './dashboard.js';
import { announce, setBase as setTitleBase } from './arrivals.js';
import { initPhoneLink } from './phone-link.js';
import { initAlerts } from './alerts.js';
import { registerServiceWorker, takeSharedFiles } from './share.js';

// ---------------------------------------------------------------------------
// 1. Constants and helpers
// ---------------------------------------------------------------------------

/** API root, resolved against the page so the node may sit behind a path prefix. */
const API_ROOT = 'api/v1/';

/** localStorage keys. The token is a plain string, the peer is JSON. */
const KEY_TOKEN = 'meshgate.token';
const KEY_PEER = 'meshgate.peer';
const KEY_THEME = 'meshgate.theme';
const KEY_CURSOR = 'meshgate.cursor';

const NODE_REFRESH_MS = 10_000;
const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 10_000;
const REQUEST_TIMEOUT_MS = 10_000;
/** A socket that opens but never says hello is treated as broken. */
const HELLO_TIMEOUT_MS = 10_000;
const MAX_EVENT_ROWS = 500;
/** How many event ids are remembered for dedupe (more than the rows kept). */
const MAX_SEEN_IDS = 5_000;
/** The node's limit for a display name: 63 characters, counted as Unicode code points (docs/api.md, Names). */
const MAX_NAME_CHARACTERS = 63;
/** Close code the node uses when a peer's token is revoked. */
const WS_CLOSE_REVOKED = 4401;
/** Close code we use ourselves when a socket never sent its hello. */
const WS_CLOSE_NO_HELLO = 4000;
const TICK_MS = 500;

/** Find the single element carrying a data-testid (they double as our hooks). */
function byTestId(id) {
  const el = document.querySelector(`[data-testid="${id}"]`);
  if (!el) throw new Error(`meshgate: missing element [data-testid="${id}"]`);
  return el;
}

/** Create an element with attributes (data-* via dataset) and children. */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'dataset') Object.assign(el.dataset, value);
    else if (name === 'className') el.className = value;
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** Set text only when it changes, so live regions are not re-announced. */
function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

/**
 * localStorage that never throws: storage can be disabled or full (private
 * browsing, quota). The page keeps working in memory in that case.
 */
const storage = {
  get(key) {
    try {
      return window.localStorage.getItem(key);
    } catch {
      return null;
    }
  },
  set(key, value) {
    try {
      window.localStorage.setItem(key, value);
    } catch {
      // Ignored on purpose: state stays in memory for this tab.
    }
  },
  remove(key) {
    try {
      window.localStorage.removeItem(key);
    } catch {
      // Ignored on purpose, see set().
    }
  },
  getJSON(key) {
    const raw = this.get(key);
    if (raw === null) return null;
    try {
      return JSON.parse(raw);
    } catch {
      return null;
    }
  },
};

/** C0 and C1 control characters, which display names may not contain. */
const CONTROL_CHARS = /\p{Cc}/u;

/** A name's length as the node counts it: Unicode code points (an emoji made of several counts as several). */
function characterCount(text) {
  return [...text].length;
}

/**
 * Client-side mirror of the server's display-name rule: 1–63 characters (code points),
 * no control characters, not only spaces. Returns an error message, or null when valid.
 */
function displayNameProblem(name) {
  const characters = characterCount(name);
  if (characters === 0) return 'Enter a display name.';
  if (characters > MAX_NAME_CHARACTERS) {
    const over = characters - MAX_NAME_CHARACTERS;
    return `Too long by ${over} character${over === 1 ? '' : 's'}: a name holds ${MAX_NAME_CHARACTERS} characters (an emoji made of several, like a flag, counts as several).`;
  }
  if (CONTROL_CHARS.test(name)) return 'Display name cannot contain control characters.';
  if (!/[^\s]/u.test(name)) return 'A name needs a letter, digit or symbol, not only spaces.';
  return null;
}

/** "12 / 63 characters". */
function nameCountText(text, maxCharacters) {
  return `${characterCount(text)} / ${maxCharacters} characters`;
}

/**
 * Compare two event cursors. Ids are increasing decimal strings, possibly
 * longer than a double can hold exactly, so compare them as digit strings.
 * Anything else falls back to plain string order.
 */
function compareCursors(a, b) {
  const x = String(a).replace(/^0+(?=\d)/, '');
  const y = String(b).replace(/^0+(?=\d)/, '');
  if (/^\d+$/.test(x) && /^\d+$/.test(y) && x.length !== y.length) {
    return x.length - y.length;
  }
  return x < y ? -1 : x > y ? 1 : 0;
}

/** "3d 4h 05m 06s"-style duration from seconds. */
function formatDuration(totalSeconds) {
  if (!Number.isFinite(totalSeconds) || totalSeconds < 0) return '—';
  let s = Math.floor(totalSeconds);
  const days = Math.floor(s / 86_400);
  s -= days * 86_400;
  const hours = Math.floor(s / 3_600);
  s -= hours * 3_600;
  const minutes = Math.floor(s / 60);
  s -= minutes * 60;
  const pad = (n) => String(n).padStart(2, '0');
  if (days > 0) return `${days}d ${hours}h ${pad(minutes)}m ${pad(s)}s`;
  if (hours > 0) return `${hours}h ${pad(minutes)}m ${pad(s)}s`;
  if (minutes > 0) return `${minutes}m ${pad(s)}s`;
  return `${s}s`;
}

const timeFormat = new Intl.DateTimeFormat(undefined, {
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
});
const dateTimeFormat = new Intl.DateTimeFormat(undefined, {
  dateStyle: 'medium',
  timeStyle: 'medium',
});

/** Shown for values the node has not told us yet. */
const UNKNOWN = '—';

/** Print a count from the API, or a dash when it is missing. */
function formatCount(value) {
  return Number.isFinite(value) ? String(value) : UNKNOWN;
}

// ---------------------------------------------------------------------------
// 2. REST client
// ---------------------------------------------------------------------------

/** An API failure. status 0 means the node could not be reached at all. */
class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

/** Absolute http(s) URL of an API path, with optional query parameters. */
function apiUrl(path, query = {}) {
  const url = new URL(API_ROOT + path, document.baseURI);
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== '') {
      url.searchParams.set(name, String(value));
    }
  }
  return url;
}

/**
 * Call the JSON API. Resolves with the parsed body (null for 204 / empty),
 * rejects with an ApiError carrying the server's error code and message.
 */
async function api(path, { method = 'GET', token, body, query } = {}) {
  const headers = { Accept: 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';

  const controller = new AbortController();
  const timer = window.setTimeout(() => controller.abort(), REQUEST_TIMEOUT_MS);
  let response;
  let text;
  try {
    response = await fetch(apiUrl(path, query), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      signal: controller.signal,
    });
    text = await response.text();
  } catch (err) {
    const timedOut = err instanceof DOMException && err.name === 'AbortError';
    throw new ApiError(
      0,
      timedOut ? 'timeout' : 'network',
      timedOut ? 'The node did not answer in time.' : 'Could not reach the node.',
    );
  } finally {
    window.clearTimeout(timer);
  }

  let payload = null;
  if (text) {
    try {
      payload = JSON.parse(text);
    } catch {
      payload = null;
    }
  }
  if (!response.ok) {
    const error = payload && typeof payload === 'object' ? payload.error : null;
    throw new ApiError(
      response.status,
      (error && error.code) || `http_${response.status}`,
      (error && error.message) || `The node answered ${response.status} ${response.statusText}`.trim(),
    );
  }
  return payload;
}

// ---------------------------------------------------------------------------
// 3. Connection badge
// ---------------------------------------------------------------------------

/**
 * The header badge. States:
 *   connecting – opening the event socket (or first contact with the node)
 *   live       – event socket open and greeted
 *   offline    – node unreachable; `retryAt` (ms since epoch) drives the countdown
 *   idle       – node reachable but nobody signed in, so no event socket
 */
const badge = {
  root: byTestId('connection-state'),
  label: byTestId('connection-label'),
  retry: byTestId('connection-retry'),
  retryButton: byTestId('retry-now'),
  state: 'connecting',
  retryAt: 0,

  set(state, retryAt = 0) {
    this.state = state;
    this.retryAt = retryAt;
    this.render();
  },

  render() {
    const labels = {
      connecting: 'Connecting…',
      live: 'Live',
      offline: 'Offline',
      idle: 'Not signed in',
    };
    this.root.dataset.state = this.state;
    setText(this.label, labels[this.state] ?? this.state);

    const offline = this.state === 'offline';
    this.retry.hidden = !offline;
    this.retryButton.hidden = !offline;
    if (offline) {
      const seconds = Math.ceil((this.retryAt - Date.now()) / 1000);
      setText(this.retry, seconds > 0 ? `retrying in ${seconds} s` : 'retrying…');
    }
  },
};

// ---------------------------------------------------------------------------
// 4. Node panel
// ---------------------------------------------------------------------------

/** Exponential backoff with jitter: 0.5 s, 1 s, 2 s … capped at 10 s, ±25 %. */
class Backoff {
  constructor(minMs = BACKOFF_MIN_MS, maxMs = BACKOFF_MAX_MS) {
    this.minMs = minMs;
    this.maxMs = maxMs;
    this.attempt = 0;
  }

  /** Delay before the next attempt, in milliseconds. */
  next() {
    const base = Math.min(this.maxMs, this.minMs * 2 ** Math.min(this.attempt, 20));
    this.attempt += 1;
    const jittered = base * (0.75 + Math.random() * 0.5);
    return Math.round(Math.min(this.maxMs, Math.max(this.minMs, jittered)));
  }

  reset() {
    this.attempt = 0;
  }
}

const nodePanel = {
  headerName: byTestId('node-name'),
  name: byTestId('node-info-name'),
  id: byTestId('node-id'),
  version: byTestId('node-version'),
  uptime: byTestId('node-uptime'),
  peerCount: byTestId('node-peer-count'),
  openWebSockets: byTestId('node-open-websockets'),
  status: byTestId('node-status'),

  node: null,
  /** performance.now() when `node.uptimeSeconds` was read. */
  receivedAt: 0,
  /** true / false once the first /node request has settled; null before. */
  reachable: null,
  timer: 0,
  backoff: new Backoff(),
  /** Epoch ms of the next poll after a failure (for the badge countdown). */
  retryAt: 0,
  /** Called after every reachability change. */
  onReachability: () => {},

  /** Show node info from GET /node or from the WebSocket hello. */
  update(node) {
    if (!node || typeof node !== 'object') return;
    this.node = node;
    this.receivedAt = performance.now();
    const name = node.name ? String(node.name) : UNKNOWN;
    setText(this.headerName, name);
    setText(this.name, name);
    setText(this.id, node.id ? String(node.id) : UNKNOWN);
    setText(this.version, node.version ? String(node.version) : UNKNOWN);
    setText(this.peerCount, formatCount(node.peerCount));
    setText(this.openWebSockets, formatCount(node.openWebSockets));
    if (node.startedAt) {
      const started = new Date(node.startedAt);
      this.uptime.title = Number.isNaN(started.getTime())
        ? ''
        : `Started ${dateTimeFormat.format(started)}`;
    }
    setTitleBase(node.name ? `${node.name} · meshgate` : 'meshgate');
    this.tick();
  },

  /** Advance the uptime locally between refreshes. */
  tick() {
    // While the node is unreachable its uptime is unknown: keep the last value.
    if (!this.node || this.reachable === false) return;
    let seconds = Number(this.node.uptimeSeconds);
    if (!Number.isFinite(seconds) && this.node.startedAt) {
      seconds = (Date.now() - new Date(this.node.startedAt).getTime()) / 1000;
    } else {
      seconds += (performance.now() - this.receivedAt) / 1000;
    }
    setText(this.uptime, formatDuration(seconds));
  },

  setReachable(reachable) {
    this.reachable = reachable;
    this.status.hidden = reachable;
    if (!reachable) {
      setText(
        this.status,
        this.node
          ? 'The node is not answering; these are the last known values.'
          : 'The node is not answering yet.',
      );
    }
    this.onReachability(reachable);
  },

  /** Fetch /node now, then every 10 s (or with backoff while it fails). */
  async refresh() {
    window.clearTimeout(this.timer);
    let delay = NODE_REFRESH_MS;
    try {
      this.update(await api('node'));
      this.backoff.reset();
      this.retryAt = 0;
      this.setReachable(true);
    } catch {
      delay = this.backoff.next();
      this.retryAt = Date.now() + delay;
      this.setReachable(false);
    }
    window.clearTimeout(this.timer);
    this.timer = window.setTimeout(() => this.refresh(), delay);
  },
};

// ---------------------------------------------------------------------------
// 5. Event list
// ---------------------------------------------------------------------------

const eventList = {
  list: byTestId('event-list'),
  empty: byTestId('events-empty'),
  count: byTestId('event-count'),
  filterInput: byTestId('event-filter'),
  clearButton: byTestId('clear-events'),

  /** Ids already shown (or cleared from view) in this session; insertion-ordered. */
  seen: new Set(),
  /** Events with ids at or below this were delivered before; never show them. */
  floor: null,
  /** Lower-cased filter terms; a row matches if its type contains any of them. */
  terms: [],
  signedIn: false,

  init() {
    this.filterInput.addEventListener('input', () => this.applyFilter());
    this.clearButton.addEventListener('click', () => this.clearView());
    this.render();
  },

  /** Forget everything (used when the peer changes). */
  reset() {
    this.list.replaceChildren();
    this.seen.clear();
    this.floor = null;
    this.render();
  },

  /** "Clear view": empty the DOM only; ids stay seen so nothing comes back. */
  clearView() {
    this.list.replaceChildren();
    this.render();
  },

  /**
   * Accept an event from the socket. Returns false for duplicates (already
   * seen, or at/below the cursor we resumed from).
   */
  add(event) {
    const id = String(event.id);
    if (this.seen.has(id)) return false;
    if (this.floor !== null && compareCursors(id, this.floor) <= 0) return false;
    this.seen.add(id);
    if (this.seen.size > MAX_SEEN_IDS) {
      // Sets iterate in insertion order: drop the oldest id.
      this.seen.delete(this.seen.values().next().value);
    }

    const row = this.renderRow(id, event);
    row.hidden = !this.matches(row.dataset.type);

    // Newest first. Events normally arrive in order, so the new row goes on
    // top; walk down only if one arrives out of order.
    let before = this.list.firstElementChild;
    while (before && compareCursors(before.dataset.id, id) > 0) {
      before = before.nextElementSibling;
    }
    this.list.insertBefore(row, before);

    while (this.list.childElementCount > MAX_EVENT_ROWS) {
      this.list.lastElementChild.remove();
    }
    this.render();
    return true;
  },

  renderRow(id, event) {
    const type = String(event.type);
    const at = event.at ? new Date(event.at) : null;
    const validAt = at && !Number.isNaN(at.getTime());

    const time = h(
      'time',
      {
        className: 'event-time',
        datetime: validAt ? at.toISOString() : undefined,
        title: validAt ? dateTimeFormat.format(at) : undefined,
      },
      validAt ? timeFormat.format(at) : event.at ? String(event.at) : '',
    );

    const head = h(
      'div',
      { className: 'event-head' },
      h('code', { className: 'event-type', dataset: { testid: 'event-type' } }, type),
      time,
      h('span', { className: 'event-id', title: 'Event id (cursor)' }, `#${id}`),
    );

    const hasData =
      event.data !== undefined &&
      event.data !== null &&
      !(typeof event.data === 'object' && Object.keys(event.data).length === 0);

    let body;
    if (hasData) {
      const compact = JSON.stringify(event.data);
      const preview = compact.length > 120 ? `${compact.slice(0, 119)}…` : compact;
      body = h(
        'details',
        { className: 'event-data' },
        h('summary', {}, h('span', { className: 'event-preview' }, preview)),
        h('pre', { className: 'event-json' }, h('code', {}, JSON.stringify(event.data, null, 2))),
      );
    } else {
      body = h('p', { className: 'event-nodata' }, 'No data');
    }

    return h(
      'li',
      { className: 'event', dataset: { testid: 'event-row', type, id } },
      head,
      body,
    );
  },

  matches(type) {
    if (this.terms.length === 0) return true;
    const lower = type.toLowerCase();
    return this.terms.some((term) => lower.includes(term));
  },

  /** Filter rows by type: comma- or space-separated terms, any may match. */
  applyFilter() {
    this.terms = this.filterInput.value
      .toLowerCase()
      .split(/[\s,]+/)
      .filter(Boolean);
    for (const row of this.list.children) {
      row.hidden = !this.matches(row.dataset.type);
    }
    this.render();
  },

  /** Update the count line and the empty-state message. */
  render() {
    const total = this.list.childElementCount;
    let shown = total;
    if (this.terms.length > 0) {
      shown = 0;
      for (const row of this.list.children) if (!row.hidden) shown += 1;
    }
    const noun = total === 1 ? 'event' : 'events';
    setText(
      this.count,
      shown === total ? `${total} ${noun}` : `Showing ${shown} of ${total} ${noun}`,
    );

    let message = '';
    if (!this.signedIn && total === 0) message = 'Sign in to see live events.';
    else if (total === 0) message = 'No events yet. New ones appear here as they happen.';
    else if (shown === 0) message = `No events match “${this.filterInput.value.trim()}”.`;
    this.empty.hidden = message === '';
    setText(this.empty, message);
  },
};

// ---------------------------------------------------------------------------
// 6. Live socket
// ---------------------------------------------------------------------------

/**
 * Keeps one event WebSocket open for the signed-in peer. Before every attempt
 * it checks the token with GET /peers/me: a browser cannot see why a
 * WebSocket upgrade failed, but a 401 there means the token is gone for good
 * (e.g. the node's data was wiped), which is a sign-out, not a retry.
 */
class LiveSocket {
  /**
   * @param {object} hooks
   * @param {() => string|null} hooks.getCursor  resume point (`since`)
   * @param {(peer: object) => void} hooks.onPeer
   * @param {(hello: object) => void} hooks.onHello
   * @param {(event: object) => void} hooks.onEvent
   * @param {(reason: 'unknown'|'revoked') => void} hooks.onSignedOut
   * @param {(state: string, retryAt?: number) => void} hooks.onState
   */
  constructor(hooks) {
    this.hooks = hooks;
    this.token = null;
    this.ws = null;
    this.retryTimer = 0;
    this.helloTimer = 0;
    this.backoff = new Backoff();
    /** Bumped on every start/stop/attempt so stale callbacks are ignored. */
    this.generation = 0;
  }

  get running() {
    return this.token !== null;
  }

  start(token) {
    this.stop();
    this.token = token;
    this.backoff.reset();
    this.connect();
  }

  /** Close on purpose; no reconnect follows. */
  stop() {
    this.generation += 1;
    this.token = null;
    window.clearTimeout(this.retryTimer);
    window.clearTimeout(this.helloTimer);
    this.closeSocket(1000, 'client stopped');
  }

  /** Skip the rest of the backoff wait. */
  retryNow() {
    if (!this.running || this.ws) return;
    window.clearTimeout(this.retryTimer);
    this.connect();
  }

  closeSocket(code, reason) {
    const ws = this.ws;
    this.ws = null;
    if (!ws) return;
    ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    if (ws.readyState === WebSocket.CONNECTING || ws.readyState === WebSocket.OPEN) {
      ws.close(code, reason);
    }
  }

  scheduleRetry() {
    const delay = this.backoff.next();
    const retryAt = Date.now() + delay;
    this.hooks.onState('offline', retryAt);
    window.clearTimeout(this.retryTimer);
    this.retryTimer = window.setTimeout(() => this.connect(), delay);
  }

  async connect() {
    const generation = ++this.generation;
    const token = this.token;
    if (!token) return;
    this.hooks.onState('connecting');

    // 1. Is the token still known to the node?
    try {
      const result = await api('peers/me', { token });
      if (generation !== this.generation) return;
      if (result && result.peer) this.hooks.onPeer(result.peer);
    } catch (err) {
      if (generation !== this.generation) return;
      if (err.status === 401) {
        this.stop();
        this.hooks.onSignedOut('unknown');
      } else {
        this.scheduleRetry();
      }
      return;
    }

    // 2. Open the socket, resuming after the last event we saw.
    const url = apiUrl('ws', { token, since: this.hooks.getCursor() });
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    let ws;
    try {
      ws = new WebSocket(url);
    } catch {
      this.scheduleRetry();
      return;
    }
    this.ws = ws;

    ws.onopen = () => {
      window.clearTimeout(this.helloTimer);
      this.helloTimer = window.setTimeout(() => {
        if (this.ws === ws) ws.close(WS_CLOSE_NO_HELLO, 'no hello');
      }, HELLO_TIMEOUT_MS);
    };

    ws.onmessage = (message) => {
      if (this.ws !== ws || typeof message.data !== 'string') return; // binary frames: streams, not ours
      let frame;
      try {
        frame = JSON.parse(message.data);
      } catch {
        return;
      }
      if (!frame || typeof frame !== 'object') return;
      if (frame.type === 'hello') {
        window.clearTimeout(this.helloTimer);
        this.backoff.reset();
        this.hooks.onHello(frame.data ?? {});
        this.hooks.onState('live');
      } else if (frame.id !== undefined && frame.id !== null && typeof frame.type === 'string') {
        this.hooks.onEvent(frame);
      }
    };

    // Errors are always followed by a close event; handle everything there.
    ws.onerror = () => {};

    ws.onclose = (close) => {
      if (this.ws !== ws) return;
      this.ws = null;
      window.clearTimeout(this.helloTimer);
      if (close.code === WS_CLOSE_REVOKED) {
        this.stop();
        this.hooks.onSignedOut('revoked');
      } else {
        this.scheduleRetry();
      }
    };
  }
}

// ---------------------------------------------------------------------------
// 7. Identity
// ---------------------------------------------------------------------------

/** What this tab knows about the signed-in peer. */
const session = {
  token: storage.get(KEY_TOKEN),
  peer: storage.getJSON(KEY_PEER),
  cursor: storage.get(KEY_CURSOR),
  /** Cursor at which `peer` was last known current (from hello or peer.updated). */
  peerCursor: null,
};

/**
 * Keep the badge in step with `peer.updated` events about ourselves. The
 * hello's peer is current as of the hello's cursor, so replayed events at or
 * below it are older news and must not roll the name back.
 */
function applyPeerUpdate(event) {
  if (event.type !== 'peer.updated') return;
  const peer = event.data && typeof event.data === 'object' ? event.data.peer : null;
  if (!peer || typeof peer !== 'object' || !session.token) return;
  if (session.peer && session.peer.id && peer.id !== session.peer.id) return;
  if (session.peerCursor !== null && compareCursors(String(event.id), session.peerCursor) <= 0) return;
  session.peerCursor = String(event.id);
  session.peer = { ...(session.peer ?? {}), ...peer };
  storage.set(KEY_PEER, JSON.stringify(session.peer));
  renderIdentity();
}

/** Advance the resume cursor (persisted) if `id` is newer. */
function advanceCursor(id) {
  const cursor = String(id);
  if (session.cursor === null || compareCursors(cursor, session.cursor) > 0) {
    session.cursor = cursor;
    storage.set(KEY_CURSOR, cursor);
  }
}

const ui = {
  notice: byTestId('identity-notice'),
  form: byTestId('sign-in-form'),
  nameInput: byTestId('name-input'),
  byteCount: byTestId('name-byte-count'),
  nameError: byTestId('sign-in-error'),
  submit: byTestId('sign-in-submit'),
  peerBadge: byTestId('peer-badge'),
  peerLine: document.querySelector('.peer-line'),
  peerName: byTestId('peer-name'),
  peerId: byTestId('peer-id'),
  copyButton: byTestId('copy-token'),
  switchButton: byTestId('switch-peer'),
  leaveButton: byTestId('leave'),
  tokenFallback: byTestId('token-fallback'),
  tokenField: byTestId('token-field'),
  peerStatus: byTestId('peer-status'),
};

let peerStatusTimer = 0;

/** Transient status line under the peer buttons. */
function showPeerStatus(text, { sticky = false } = {}) {
  window.clearTimeout(peerStatusTimer);
  setText(ui.peerStatus, text);
  if (!sticky && text) {
    peerStatusTimer = window.setTimeout(() => setText(ui.peerStatus, ''), 6_000);
  }
}

function showNotice(text) {
  setText(ui.notice, text ?? '');
  ui.notice.hidden = !text;
}

/** Show the form or the peer badge to match `session`. */
function renderIdentity() {
  const signedIn = Boolean(session.token);
  ui.form.hidden = signedIn;
  ui.peerBadge.hidden = !signedIn;
  eventList.signedIn = signedIn;
  eventList.render();
  if (signedIn) {
    const peer = session.peer ?? {};
    setText(ui.peerName, peer.displayName ? String(peer.displayName) : 'unknown peer');
    setText(ui.peerId, peer.id ? String(peer.id) : UNKNOWN);
  } else {
    ui.tokenFallback.hidden = true;
    ui.tokenField.value = '';
    setText(ui.peerStatus, '');
    updateByteCount();
  }
  setPeerButtonsDisabled(false);
}

function setPeerButtonsDisabled(disabled) {
  ui.copyButton.disabled = disabled;
  ui.switchButton.disabled = disabled;
  ui.leaveButton.disabled = disabled;
}

/** Badge state when nobody is signed in: it follows the /node poll. */
function renderIdleBadge() {
  if (session.token) return;
  if (nodePanel.reachable === null) badge.set('connecting');
  else if (nodePanel.reachable) badge.set('idle');
  else badge.set('offline', nodePanel.retryAt);
}

const dashboard = createDashboard({ h, api, ApiError, setText, byTestId, storage });

const socket = new LiveSocket({
  getCursor: () => session.cursor,
  onPeer(peer) {
    session.peer = peer;
    storage.set(KEY_PEER, JSON.stringify(peer));
    renderIdentity();
    dashboard.setPeer(peer);
  },
  onHello(hello) {
    if (hello.peer) this.onPeer(hello.peer);
    if (hello.node) {
      nodePanel.update(hello.node);
      nodePanel.setReachable(true);
    }
    // Everything after `since` is replayed by the node; never show what we
    // had before it, even if the seen-id set was lost by a reload.
    eventList.floor = session.cursor;
    session.peerCursor = hello.cursor === undefined || hello.cursor === null ? null : String(hello.cursor);
    const latest = hello.cursor === undefined || hello.cursor === null ? '' : String(hello.cursor);
    if (latest !== '' && (session.cursor === null || compareCursors(latest, session.cursor) < 0)) {
      // First socket for this peer (start at the node's latest event), or the
      // node's log is behind our cursor (it was reset): follow the node.
      session.cursor = latest;
      storage.set(KEY_CURSOR, latest);
      if (eventList.floor !== null) eventList.floor = latest;
    }
    // Reload the views over REST; events after this hello keep them current.
    dashboard.onHello();
  },
  onEvent(event) {
    if (eventList.add(event)) {
      advanceCursor(event.id);
      dashboard.onEvent(event);
    }
    applyPeerUpdate(event);
  },
  onSignedOut(reason) {
    signOutLocally({
      notice:
        reason === 'revoked'
          ? 'The node revoked your token. Choose a name to sign in again.'
          : 'The node no longer knows your peer (its data may have been reset). Choose a name to sign in again.',
    });
  },
  onState(state, retryAt) {
    const was = badge.state;
    badge.set(state, retryAt);
    // The socket dropped: ask /node at once, so the node panel marks its
    // values as stale now rather than at the next 10 s poll.
    if (state === 'offline' && was !== 'offline') nodePanel.refresh();
  },
});

let nodeRefreshTimer = 0;

/**
 * Re-read /node shortly after our own socket or peer went away, so the peer
 * and WebSocket counts do not stay stale until the next poll. The short wait
 * lets the node finish closing the socket before it counts.
 */
function refreshNodeSoon(delayMs = 300) {
  window.clearTimeout(nodeRefreshTimer);
  nodeRefreshTimer = window.setTimeout(() => nodePanel.refresh(), delayMs);
}

/**
 * Forget the peer in this tab (and, unless `persist` is false, in storage),
 * and show the sign-in form again.
 */
function signOutLocally({ notice = '', focus = false, persist = true } = {}) {
  socket.stop();
  session.token = null;
  session.peer = null;
  session.cursor = null;
  session.peerCursor = null;
  if (persist) {
    storage.remove(KEY_TOKEN);
    storage.remove(KEY_PEER);
    storage.remove(KEY_CURSOR);
  }
  eventList.reset();
  dashboard.signOut();
  renderIdentity();
  showNotice(notice);
  renderIdleBadge();
  if (focus) ui.nameInput.focus();
  refreshNodeSoon();
}

/** Begin a session for a freshly created (or adopted) peer. */
function startSession(token, peer, { persist = true } = {}) {
  session.token = token;
  session.peer = peer;
  session.peerCursor = null;
  session.cursor = persist ? null : storage.get(KEY_CURSOR);
  if (persist) {
    // A new peer has its own event log: the old cursor means nothing to it.
    // The token goes last so other tabs see a complete session when it lands.
    storage.remove(KEY_CURSOR);
    storage.set(KEY_PEER, JSON.stringify(peer));
    storage.set(KEY_TOKEN, token);
  }
  eventList.reset();
  dashboard.signIn(token, peer);
  showNotice('');
  renderIdentity();
  socket.start(token);
  if (persist) {
    // Joined: the field typed into is gone. Start at the top of the page, with the focus on the view shown (its
    // tab), not wherever the browser scrolled while the form folded away.
    const tab = document.querySelector('.tab[aria-selected="true"]');
    if (tab) tab.focus({ preventScroll: true });
    window.scrollTo({ top: 0, left: 0, behavior: 'instant' });
  }
}

/** Live character counter and inline validation while typing (a stale error goes as soon as the name is fine). */
function updateByteCount() {
  const value = ui.nameInput.value;
  const characters = characterCount(value);
  setText(ui.byteCount, nameCountText(value, MAX_NAME_CHARACTERS));
  ui.byteCount.classList.toggle('is-over', characters > MAX_NAME_CHARACTERS);
  // While typing, only complain about real violations, not an empty field.
  const problem = characters > 0 ? displayNameProblem(value) : null;
  showNameError(problem);
}

function showNameError(message) {
  ui.nameError.hidden = !message;
  setText(ui.nameError, message ?? '');
  if (message) ui.nameInput.setAttribute('aria-invalid', 'true');
  else ui.nameInput.removeAttribute('aria-invalid');
}

async function onSignIn(submitEvent) {
  submitEvent.preventDefault();
  const displayName = ui.nameInput.value;
  const problem = displayNameProblem(displayName);
  if (problem) {
    showNameError(problem);
    ui.nameInput.focus();
    return;
  }

  showNameError(null);
  ui.submit.disabled = true;
  ui.form.setAttribute('aria-busy', 'true');
  const submitLabel = ui.submit.textContent;
  ui.submit.textContent = 'Joining…';
  try {
    const result = await api('peers', { method: 'POST', body: { displayName } });
    if (!result || typeof result.token !== 'string' || !result.peer) {
      throw new ApiError(500, 'bad_response', 'The node sent an unexpected answer.');
    }
    ui.nameInput.value = '';
    startSession(result.token, result.peer);
    // The focus is on the view shown, at the top (startSession); who you are now is said, not scrolled to.
    announce(`You joined as ${result.peer.displayName}.`);
  } catch (err) {
    const message =
      err instanceof ApiError && err.status === 0
        ? `${err.message} Check that it is running, then try again.`
        : err.message;
    showNameError(message);
    ui.nameInput.focus();
  } finally {
    ui.submit.disabled = false;
    ui.form.removeAttribute('aria-busy');
    ui.submit.textContent = submitLabel;
  }
}

/** Copy the token: Clipboard API where allowed, otherwise select it in a field. */
async function onCopyToken() {
  const token = session.token;
  if (!token) return;
  if (window.isSecureContext && navigator.clipboard && navigator.clipboard.writeText) {
    try {
      await navigator.clipboard.writeText(token);
      ui.tokenFallback.hidden = true;
      showPeerStatus('Token copied to the clipboard.');
      return;
    } catch {
      // Permission denied or no focus: fall back to a manual copy below.
    }
  }
  // Plain http on a LAN address is not a secure context, so the Clipboard
  // API is missing there. Show the token selected and try the legacy copy.
  ui.tokenField.value = token;
  ui.tokenFallback.hidden = false;
  ui.tokenField.focus();
  ui.tokenField.select();
  let copied = false;
  try {
    copied = document.execCommand('copy');
  } catch {
    copied = false;
  }
  showPeerStatus(
    copied
      ? 'Token copied to the clipboard.'
      : 'The token is selected: press Ctrl+C (⌘C on a Mac) to copy it.',
    { sticky: !copied },
  );
}

/** Forget this peer locally (it stays on the node) and sign in anew. */
function onSwitchPeer() {
  signOutLocally({ notice: 'Signed out on this page. Your previous peer still exists on the node.', focus: true });
}

/** Remove the peer from the node, then forget it. */
async function onLeave() {
  const token = session.token;
  if (!token) return;
  const name = session.peer?.displayName;
  setPeerButtonsDisabled(true);
  showPeerStatus('Leaving…', { sticky: true });
  // Close our socket first, so the node closing it is not read as a revocation,
  // and let the views ask nothing more with a token that is about to go.
  socket.stop();
  dashboard.setPaused(true);
  try {
    await api('peers/me', { method: 'DELETE', token });
  } catch (err) {
    // 401: the node no longer knows this peer, which is what we wanted.
    if (!(err instanceof ApiError) || err.status !== 401) {
      dashboard.setPaused(false);
      setPeerButtonsDisabled(false);
      showPeerStatus(`Could not leave: ${err.message}`, { sticky: true });
      if (session.token === token) socket.start(token);
      return;
    }
  }
  dashboard.forgetDrafts();
  signOutLocally({ notice: name ? `You left the mesh (${name}).` : 'You left the mesh.', focus: true });
}

/** Another tab signed in or out: follow it, so two tabs never mix peers. */
function onStorage(event) {
  if (event.storageArea !== window.localStorage) return;
  if (event.key !== KEY_TOKEN && event.key !== null) return; // null: storage cleared
  const token = storage.get(KEY_TOKEN);
  if (token === session.token) return;
  if (token) {
    startSession(token, storage.getJSON(KEY_PEER), { persist: false });
  } else {
    signOutLocally({ notice: 'Signed out in another tab.', persist: false });
  }
}

// ---------------------------------------------------------------------------
// 8. Boot
// ---------------------------------------------------------------------------

function retryEverything() {
  nodePanel.refresh();
  socket.retryNow();
}

/** The Theme picker beside the system setting: "system" follows prefers-color-scheme; light or dark is kept. */
function initTheme() {
  const select = document.querySelector('[data-testid="theme-select"]');
  const apply = (value) => {
    const theme = value === 'light' || value === 'dark' ? value : 'system';
    if (theme === 'system') delete document.documentElement.dataset.theme;
    else document.documentElement.dataset.theme = theme;
    select.value = theme;
  };
  apply(storage.get(KEY_THEME));
  select.addEventListener('change', () => {
    if (select.value === 'system') storage.remove(KEY_THEME);
    else storage.set(KEY_THEME, select.value);
    apply(select.value);
  });
}

/**
 * The tab bar sticks to the top of the screen, and its height changes with the width (it wraps on a phone) and
 * its badges: keep it in --sticky-top, which the page's scroll-padding-top reads, so that nothing scrolled to
 * (a focused control, a room's top, a tapped link) ends up under the bar.
 */
function initStickyTop() {
  const bar = document.querySelector('.tabs');
  if (!bar || typeof ResizeObserver === 'undefined') return;
  const keep = () => document.documentElement.style.setProperty('--sticky-top', `${Math.ceil(bar.getBoundingClientRect().height)}px`);
  new ResizeObserver(keep).observe(bar);
  keep();
}

function boot() {
  initTheme();
  initStickyTop();
  initPhoneLink();
  initAlerts();
  eventList.init();
  dashboard.init();

  ui.form.addEventListener('submit', onSignIn);
  ui.nameInput.addEventListener('input', updateByteCount);
  ui.copyButton.addEventListener('click', onCopyToken);
  ui.switchButton.addEventListener('click', onSwitchPeer);
  ui.leaveButton.addEventListener('click', onLeave);
  ui.tokenField.addEventListener('focus', () => ui.tokenField.select());
  badge.retryButton.addEventListener('click', retryEverything);

  nodePanel.onReachability = renderIdleBadge;
  window.addEventListener('storage', onStorage);
  window.addEventListener('online', retryEverything);
  // Close the socket when the page is hidden for good or put in the
  // back/forward cache; reopen it if the page comes back.
  window.addEventListener('pagehide', () => socket.stop());
  window.addEventListener('pageshow', (event) => {
    if (event.persisted && session.token) socket.start(session.token);
  });

  renderIdentity();
  badge.render();
  nodePanel.refresh();
  if (session.token) {
    dashboard.signIn(session.token, session.peer);
    socket.start(session.token);
  } else {
    ui.nameInput.focus(); // signed out: the one thing to do here is to sign in
  }

  // Files shared to the installed dashboard arrive through the service worker as ?share=<id>.
  registerServiceWorker();
  takeSharedFiles().then((shared) => {
    if (shared) dashboard.receiveShared(shared);
  });

  // One clock for the uptime and the retry countdown.
  window.setInterval(() => {
    nodePanel.tick();
    dashboard.tick();
    if (badge.state === 'offline') badge.render();
  }, TICK_MS);
}

boot();
