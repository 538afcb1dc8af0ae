// meshgate dashboard: the Files view. Pick or drop files to send to a member
// of one of your sessions; progress bars on both sides; cancel; download when
// finished. Created by dashboard.js, which hands it its helpers and forwards
// the socket's hello and events.
//
// REST: POST /sessions/{id}/resources?to=&name= (raw body) → 202 {transfer};
// GET /transfers; DELETE /transfers/{id}; GET /transfers/{id}/content.
// Events: transfer.started | progress | finished | failed | canceled, each
// with data.transfer; with file consent (--file-consent ask) also
// transfer.offered (to the recipient: Accept / Decline), transfer.accepted and
// transfer.declined.
//
// File consent: an incoming file in state awaitingConsent is shown as a prompt
// above every view (file-prompts) and as its row in Files, each with Accept,
// Decline and "Always accept files from <name>" (POST /transfers/{id}/accept
// {always}, /decline). The always-accept list (GET /file-consent) is shown in
// Files with an "Ask again" button each (DELETE /file-consent/always-accept/{peerId}).
// A file promised by an accepted one-step-send invitation ("Ann wants to send you
// plan.pdf (2.0 KB)") is accepted without asking twice (see `expect`).
//
// The upload to our own node is an XMLHttpRequest (fetch has no upload
// progress); from then on the node reports the delivery to the receiver's node.

import { announce, arrive, count as countArrivals } from './arrivals.js';

const HISTORY_PAGE = 200;
const HISTORY_MAX_PAGES = 5;
const ACTIVE = new Set(['pending', 'awaitingConsent', 'inProgress', 'interrupted']);
const ENDED = new Set(['finished', 'failed', 'canceled', 'declined']);
const STATE_TEXT = {
  uploading: 'uploading to your node',
  pending: 'waiting for the receiver',
  awaitingConsent: 'waiting for your answer',
  inProgress: 'sending',
  receiving: 'receiving',
  interrupted: 'interrupted: resumes when the link is back',
  finished: 'finished',
  failed: 'failed',
  canceled: 'canceled',
  declined: 'declined',
};

/** "1.5 MB"-style size. */
export function formatBytes(bytes) {
  if (!Number.isFinite(bytes)) return '—';
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KB', 'MB', 'GB', 'TB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

/**
 * @param {object} deps from dashboard.js: h, call, apiUrl, token, setText, byTestId, syncList,
 *   animateIn, guard, peerName, showError, me, signedIn, sessions
 */
export function createFiles(deps) {
  const { h, call, setText, byTestId, syncList, animateIn, peerName, showError } = deps;

  const state = {
    visible: false, // whether the Files view is the one shown
    unseen: new Set(), // ids of incoming transfers that started while the Files view was not shown
    transfers: new Map(), // transfer id → transfer
    uploads: new Map(), // local key → {key, name, size, loaded, xhr, error, to, transferId}
    uploadSeq: 0,
    // One row per file: the node's transfer for an upload keeps the upload's row (its key), whether the
    // transfer.started event or the upload's 202 comes first.
    rowKeys: new Map(), // transfer id → row key
    keyTransfers: new Map(), // row key → transfer id
    // File consent.
    deadlines: new Map(), // id of an incoming transfer awaiting consent → when its wait ends (ms), from transfer.offered
    // Interrupted transfers: id → {nodeId, since (ms)}, from transfer.interrupted (the node that went away, and when).
    paused: new Map(),
    // Files that arrived while the page was open, shown above every view until downloaded or dismissed: id → transfer.
    arrived: new Map(),
    // A group send whose recipients' node refused it because it asks before storing a file (a node of an earlier
    // version; a current node asks each recipient itself): each such recipient is sent the file on its own (and
    // asked); upload key → the group it belongs to, so the group's line counts it.
    askGroups: new Map(),
    // Group transfers refused because their node asks (each was sent again on its own): not shown as failures.
    reasked: new Set(),
    answering: new Set(), // ids whose Accept / Decline is on its way to the node
    accepting: new Set(), // ids accepted without asking (promised by an accepted invitation): never prompted
    problems: new Map(), // transfer id → why its answer failed
    consent: null, // GET /file-consent: {mode, timeoutSeconds, alwaysAccept: [{peerId, displayName, since}]}
    shared: [], // File objects shared to the dashboard (share target), waiting for Send
    // Files this peer already agreed to by accepting an invitation that said what was coming ("Ann wants to send
    // you plan.pdf (2.0 KB)"): with file consent on, they are accepted without asking twice.
    expected: [], // {sessionId, fromId, name, prefix, count, maxBytes, bytes, until}
  };

  const el = {
    session: byTestId('file-session'),
    to: byTestId('file-to'),
    some: byTestId('file-to-some'),
    someList: byTestId('file-to-some-list'),
    drop: byTestId('file-drop'),
    input: byTestId('file-input'),
    error: byTestId('file-error'),
    list: byTestId('transfers-list'),
    groups: byTestId('group-summaries'),
    empty: byTestId('transfers-empty'),
    badge: byTestId('files-badge'),
    prompts: byTestId('file-prompts'),
    promptList: byTestId('file-prompt-list'),
    arrivals: byTestId('file-arrivals'),
    arrivalList: byTestId('file-arrival-list'),
    always: byTestId('always-accept'),
    alwaysList: byTestId('always-accept-list'),
    shared: byTestId('shared-files'),
    sharedList: byTestId('shared-list'),
    sharedSend: byTestId('shared-send'),
    sharedDiscard: byTestId('shared-discard'),
    sharedError: byTestId('shared-error'),
  };

  const mine = (ref) => Boolean(ref && deps.me() && ref.id === deps.me().id);

  // ------------------------------------------------------------ pickers

  function connectedSessions() {
    return deps.sessions().filter((s) =>
      (s.members || []).some((m) => !mine(m) && m.state === 'connected'),
    );
  }

  function fillSelect(select, items, keyOf, labelOf, emptyLabel) {
    const current = select.value;
    const signature = items.map((i) => `${keyOf(i)}:${labelOf(i)}`).join('|');
    if (select.dataset.signature !== signature) {
      select.dataset.signature = signature;
      const options = items.map((i) => h('option', { value: keyOf(i) }, labelOf(i)));
      if (options.length === 0) options.push(h('option', { value: '' }, emptyLabel));
      select.replaceChildren(...options);
      if (items.some((i) => keyOf(i) === current)) select.value = current;
    }
    select.disabled = items.length === 0;
  }

  /** "With Bob, Cleo" (its people); the id's start only tells apart sessions with the same people. */
  function sessionLabel(s, all) {
    const people = (x) => (x.members || []).filter((m) => !mine(m)).map((m) => peerName(m)).join(', ');
    const label = `With ${people(s) || 'nobody else yet'}`;
    return all.filter((x) => people(x) === people(s)).length > 1 ? `${label} · ${String(s.id).slice(0, 8)}` : label;
  }

  function renderPickers() {
    const sessions = deps.signedIn() ? connectedSessions() : [];
    fillSelect(
      el.session,
      sessions,
      (s) => s.id,
      (s) => sessionLabel(s, sessions),
      'No session with a connected peer: start one in Sessions',
    );
    const one = sessions.length === 1;
    byTestId('file-session-field').hidden = one;
    const oneLine = byTestId('file-session-one');
    oneLine.hidden = !one;
    setText(oneLine, one ? `In your session ${sessionLabel(sessions[0], sessions).replace(/^W/, 'w')}` : '');
    const session = sessions.find((s) => s.id === el.session.value);
    const members = session ? (session.members || []).filter((m) => !mine(m) && m.state === 'connected') : [];
    // A group send (?to=a,b or ?to=all): one upload, one copy per node, a transfer (and a row) per recipient.
    const choices = members.length > 1
      ? [...members, { id: 'some', several: true }, { id: 'all', everyone: members.length }]
      : members;
    fillSelect(
      el.to,
      choices,
      (m) => m.id,
      (m) => (m.everyone ? `Everyone connected (${m.everyone})` : m.several ? 'Choose people…' : peerName(m)),
      'No one connected',
    );
    renderRecipients(members);
    const ready = members.length > 0;
    el.drop.setAttribute('aria-disabled', ready ? 'false' : 'true');
    el.drop.classList.toggle('is-disabled', !ready);
    el.input.disabled = !ready;
  }

  /** The tick boxes of "Choose people…": one per connected member, ticks kept across renders. */
  function renderRecipients(members) {
    const choosing = el.to.value === 'some';
    el.some.hidden = !choosing;
    if (!choosing) return;
    const signature = members.map((m) => `${m.id}\u0000${peerName(m)}`).join('\u0001');
    if (el.someList.dataset.signature === signature) return;
    el.someList.dataset.signature = signature;
    const ticked = new Set([...el.someList.querySelectorAll('input:checked')].map((box) => box.value));
    el.someList.replaceChildren(
      ...members.map((m) =>
        h(
          'label',
          { className: 'recipient' },
          h('input', { type: 'checkbox', value: m.id, checked: ticked.has(m.id), dataset: { testid: 'file-to-person' } }),
          ` ${peerName(m)}`,
        ),
      ),
    );
  }

  /** The `to` of an upload: a peer id, `all`, or the ticked people's ids joined by commas ('' when none). */
  function recipients() {
    if (el.to.value !== 'some') return el.to.value;
    return [...el.someList.querySelectorAll('input:checked')].map((box) => box.value).join(',');
  }

  // ------------------------------------------------------------- upload

  function sendFiles(files) {
    showError(el.error, '');
    const sessionId = el.session.value;
    const to = recipients();
    if (!sessionId || !el.to.value) {
      showError(el.error, 'Pick a session and a connected peer to send to first.');
      return;
    }
    if (!to) {
      showError(el.error, 'Tick at least one person to send to.');
      return;
    }
    for (const file of files) upload(file, sessionId, to);
  }

  function upload(file, sessionId, to) {
    state.uploadSeq += 1;
    const key = `u${state.uploadSeq}`;
    const members = deps.sessions().find((s) => s.id === sessionId)?.members || [];
    const member = to === 'all'
      ? { id: 'all', displayName: 'everyone connected' }
      : to.includes(',')
        ? {
          id: to,
          displayName: to.split(',').map((id) => peerName(members.find((m) => m.id === id) || { id })).join(', '),
        }
        : members.find((m) => m.id === to);
    const entry = { key, name: file.name, size: file.size, loaded: 0, xhr: null, error: '', to: member || { id: to } };
    state.uploads.set(key, entry);
    const url = deps.apiUrl(`sessions/${encodeURIComponent(sessionId)}/resources`, { to, name: file.name });
    const xhr = new XMLHttpRequest();
    entry.xhr = xhr;
    xhr.open('POST', url);
    xhr.setRequestHeader('Authorization', `Bearer ${deps.token()}`);
    xhr.setRequestHeader('Content-Type', file.type || 'application/octet-stream');
    xhr.setRequestHeader('Accept', 'application/json');
    xhr.responseType = 'text';
    xhr.upload.addEventListener('progress', (event) => {
      entry.loaded = event.loaded;
      render();
    });
    xhr.addEventListener('load', () => {
      entry.xhr = null;
      let payload = null;
      try {
        payload = JSON.parse(xhr.responseText || 'null');
      } catch {
        payload = null;
      }
      if (xhr.status >= 200 && xhr.status < 300 && payload && payload.group && Array.isArray(payload.transfers)) {
        // A group send: the upload's row gives way to a row per recipient and the group's summary line.
        state.uploads.delete(key);
        const asking = [];
        for (const transfer of payload.transfers) {
          if (transfer.state === 'failed' && refusedForConsent(transfer.reason)) {
            state.reasked.add(transfer.id);
            if (transfer.to) asking.push(transfer.to.id);
          }
          upsert(transfer);
        }
        // Recipients whose node asks first: each gets the file on its own, with the usual question.
        for (const id of asking) state.askGroups.set(upload(file, sessionId, id), payload.group.id);
      } else if (xhr.status === 409 && payload && payload.error && refusedForConsent(payload.error.message)
        && (to === 'all' || to.includes(','))) {
        // Every recipient's node asks first: ask each of them, one file each, as one group.
        state.uploads.delete(key);
        const members = deps.sessions().find((s) => s.id === sessionId)?.members || [];
        const ids = to === 'all'
          ? members.filter((m) => !mine(m) && m.state === 'connected').map((m) => m.id)
          : to.split(',');
        for (const id of ids) state.askGroups.set(upload(file, sessionId, id), `ask-${key}`);
      } else if (xhr.status >= 200 && xhr.status < 300 && payload && payload.transfer) {
        state.uploads.delete(key);
        adopt(payload.transfer.id, key);
        upsert(payload.transfer);
      } else {
        const message = payload && payload.error && payload.error.message;
        entry.error = message || `The node answered ${xhr.status}.`;
      }
      render();
    });
    xhr.addEventListener('error', () => {
      entry.xhr = null;
      entry.error = 'Could not reach the node; the file was not sent. Pick it again to retry.';
      render();
    });
    xhr.addEventListener('abort', () => {
      state.uploads.delete(key);
      render();
    });
    xhr.send(file);
    render();
    return key;
  }

  // ---------------------------------------------------------- transfers

  /** The transfer `id` is shown in the row `key` (an upload's). */
  function adopt(id, key) {
    if (state.rowKeys.has(id)) return;
    state.rowKeys.set(id, key);
    state.keyTransfers.set(key, id);
  }

  function transferByKey(key) {
    return state.transfers.get(state.keyTransfers.get(key) || key);
  }

  function upsert(transfer) {
    if (!transfer || !transfer.id) return;
    // A group's recipient refused by its node's file consent is sent the file on its own (see upload): that
    // transfer is the one shown, not the refusal.
    if (transfer.direction === 'outgoing' && transfer.groupId && transfer.state === 'failed' && refusedForConsent(transfer.reason)) {
      state.reasked.add(transfer.id);
    }
    if (transfer.direction === 'outgoing' && !transfer.groupId && !state.rowKeys.has(transfer.id)) {
      // The node's transfer for an upload still in flight here (its event overtook the 202): same row.
      for (const upload of state.uploads.values()) {
        if (!upload.transferId && upload.name === transfer.name && upload.size === transfer.size
          && upload.to && transfer.to && upload.to.id === transfer.to.id) {
          upload.transferId = transfer.id;
          adopt(transfer.id, upload.key);
          break;
        }
      }
    }
    const known = state.transfers.get(transfer.id);
    // An answer that left the node before the transfer ended may arrive after its last event (a small file
    // accepted with Accept can finish before the accept's response is read): an ended transfer stays ended.
    if (known && ENDED.has(known.state) && !ENDED.has(transfer.state)) return;
    // Progress events may overtake each other: never move a bar backwards within one state.
    if (known && known.state === transfer.state && (known.bytes || 0) > (transfer.bytes || 0)) {
      transfer = { ...transfer, bytes: known.bytes };
    }
    state.transfers.set(transfer.id, transfer);
  }

  async function cancel(transfer, row) {
    const error = row.querySelector('[data-testid="transfer-error"]');
    showError(error, '');
    try {
      const result = await call(`transfers/${encodeURIComponent(transfer.id)}`, { method: 'DELETE' });
      if (result && result.transfer) upsert(result.transfer);
    } catch (err) {
      showError(error, `Could not cancel: ${err.message}`);
    }
    render();
  }

  /** Downloads need the bearer token, so fetch the file and hand the browser a blob. */
  async function download(transfer, row, { error = row.querySelector('[data-testid="transfer-error"]'), button = row.querySelector('[data-testid="transfer-download"]') } = {}) {
    showError(error, '');
    button.disabled = true;
    const label = button.textContent;
    try {
      const response = await fetch(deps.apiUrl(`transfers/${encodeURIComponent(transfer.id)}/content`), {
        headers: { Authorization: `Bearer ${deps.token()}` },
        cache: 'no-store',
      });
      if (!response.ok) {
        let message = `The node answered ${response.status}.`;
        try {
          const payload = await response.json();
          if (payload && payload.error && payload.error.message) message = payload.error.message;
        } catch {
          // keep the status line
        }
        throw new Error(message);
      }
      const blob = await readWithProgress(response, transfer, button);
      const url = URL.createObjectURL(blob);
      const link = h('a', { href: url, download: transfer.name, hidden: true });
      document.body.append(link);
      link.click();
      link.remove();
      window.setTimeout(() => URL.revokeObjectURL(url), 60_000);
      row.dataset.downloaded = 'true';
      // Downloaded: its arrival card has done its job.
      if (state.arrived.delete(transfer.id)) renderArrivals();
    } catch (err) {
      showError(error, `Could not download: ${err.message}`);
    } finally {
      button.disabled = false;
      setText(button, label);
      button.removeAttribute('aria-valuenow');
    }
  }

  /** The body as a blob, with "Downloading 45%" on the button while it comes. */
  async function readWithProgress(response, transfer, button) {
    const total = Number(response.headers.get('content-length')) || transfer.size || 0;
    if (!response.body || !response.body.getReader || total <= 0) return response.blob();
    const reader = response.body.getReader();
    const chunks = [];
    let received = 0;
    let shown = -1;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      received += value.byteLength;
      const percent = Math.min(100, Math.floor((100 * received) / total));
      if (percent !== shown) {
        shown = percent;
        setText(button, `Downloading ${percent}%`);
      }
    }
    return new Blob(chunks, { type: response.headers.get('content-type') || 'application/octet-stream' });
  }

  /** "plan.pdf from Ann arrived — Download": one card per file that arrived while the page was open. */
  function renderArrivals() {
    const items = deps.signedIn() ? [...state.arrived.values()] : [];
    syncList(
      el.arrivalList,
      items,
      (t) => t.id,
      (t) => {
        const id = t.id;
        const download_ = h('button', { type: 'button', className: 'button button-small button-primary', dataset: { testid: 'file-arrival-download' } }, 'Download');
        const dismiss = h('button', { type: 'button', className: 'button button-small', dataset: { testid: 'file-arrival-dismiss' } }, 'Dismiss');
        const row = h(
          'li',
          { className: 'prompt', dataset: { testid: 'file-arrival', transferId: id } },
          h(
            'p',
            { className: 'prompt-title' },
            h('strong', { className: 'wrap', dataset: { testid: 'file-arrival-name' } }),
            ' from ',
            h('strong', { dataset: { testid: 'file-arrival-from' } }),
            ' arrived',
            h('span', { className: 'hint', dataset: { testid: 'file-arrival-size' } }),
          ),
          h('div', { className: 'button-row' }, download_, dismiss),
          h('p', { className: 'field-error', role: 'alert', dataset: { testid: 'file-arrival-error' }, hidden: true }),
        );
        download_.addEventListener('click', () => {
          const transfer = state.transfers.get(id) || state.arrived.get(id);
          if (transfer) download(transfer, row, { button: download_, error: row.querySelector('[data-testid="file-arrival-error"]') });
        });
        dismiss.addEventListener('click', () => {
          const next = row.nextElementSibling || row.previousElementSibling;
          state.arrived.delete(id);
          renderArrivals();
          // Focus stays in the card list when there is one left, else goes to the Files tab.
          const target = next && next.querySelector('[data-testid="file-arrival-download"]');
          (target || byTestId('tab-files')).focus();
        });
        animateIn(row);
        return row;
      },
      (row, t) => {
        setText(row.querySelector('[data-testid="file-arrival-name"]'), t.name);
        setText(row.querySelector('[data-testid="file-arrival-from"]'), peerName(t.from));
        setText(row.querySelector('[data-testid="file-arrival-size"]'), ` · ${formatBytes(t.size)}`);
        row.querySelector('[data-testid="file-arrival-download"]').setAttribute('aria-label', `Download ${t.name} from ${peerName(t.from)}`);
        row.querySelector('[data-testid="file-arrival-dismiss"]').setAttribute('aria-label', `Dismiss ${t.name} arrived`);
      },
    );
    el.arrivals.hidden = items.length === 0;
  }

  async function load() {
    const merged = new Map();
    let cursor = '';
    for (let page = 0; page < HISTORY_MAX_PAGES; page += 1) {
      let result;
      try {
        result = await call('transfers', { query: { limit: HISTORY_PAGE, cursor } });
      } catch {
        return; // the next hello tries again
      }
      for (const transfer of result.transfers || []) merged.set(transfer.id, transfer);
      if (!result.nextCursor) break;
      cursor = result.nextCursor;
    }
    for (const transfer of merged.values()) upsert(transfer);
    render();
  }

  // ------------------------------------------------------------ consent

  const EXPECT_MS = 10 * 60_000;
  const UNITS = { B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3, TB: 1024 ** 4 };

  /** The most bytes a size written by formatBytes ("2.0 KB", "30 MB") can stand for. */
  function sizeBound(value, unit) {
    if (unit === 'B') return Number(value);
    const decimals = value.includes('.') ? value.split('.')[1].length : 0;
    return Math.floor((Number(value) + 0.5 * 10 ** -decimals) * UNITS[unit]);
  }

  /**
   * Remembers what an accepted invitation said was coming: "<name> (<size>)" or "<n> files (<size>)", as the
   * one-step send writes it (a name over 120 characters cut with "…").
   */
  function expect(sessionId, fromId, what) {
    const many = /^(\d+) files \(([\d.]+) (B|KB|MB|GB|TB)\)$/.exec(what);
    const one = many ? null : /^(.+) \(([\d.]+) (B|KB|MB|GB|TB)\)$/.exec(what);
    if (!many && !one) return;
    const entry = { sessionId, fromId, bytes: 0, until: Date.now() + EXPECT_MS };
    if (many) Object.assign(entry, { count: Number(many[1]), maxBytes: sizeBound(many[2], many[3]) });
    else {
      const cut = one[1].endsWith('…');
      Object.assign(entry, { count: 1, maxBytes: sizeBound(one[2], one[3]), name: cut ? null : one[1], prefix: cut ? one[1].slice(0, -1) : null });
    }
    state.expected = state.expected.filter((e) => e.until > Date.now()).concat(entry);
  }

  /** The expectation an offered file fulfils (and uses up), if any. */
  function takeExpected(transfer) {
    const now = Date.now();
    state.expected = state.expected.filter((e) => e.until > now && e.count > 0);
    const entry = state.expected.find(
      (e) =>
        e.sessionId === transfer.sessionId &&
        transfer.from && e.fromId === transfer.from.id &&
        e.bytes + (transfer.size || 0) <= e.maxBytes &&
        (e.name == null || e.name === transfer.name) &&
        (e.prefix == null || String(transfer.name).startsWith(e.prefix)),
    );
    if (!entry) return null;
    entry.count -= 1;
    entry.bytes += transfer.size || 0;
    return entry;
  }

  /** Incoming files waiting for this peer's Accept or Decline, oldest first. */
  function awaiting() {
    return [...state.transfers.values()]
      .filter((t) => t.direction === 'incoming' && t.state === 'awaitingConsent' && !state.accepting.has(t.id))
      .sort((a, b) => String(a.createdAt).localeCompare(String(b.createdAt)));
  }

  function consentExpiresText(transfer) {
    const deadline = state.deadlines.get(transfer.id);
    if (!deadline) return '';
    const seconds = Math.ceil((deadline - Date.now()) / 1000);
    return seconds > 0 ? `expires in ${seconds} s` : 'expiring…';
  }

  /** The prompt's sentence: "Expires in 299 s." */
  function promptExpiresText(transfer) {
    const text = consentExpiresText(transfer);
    return text ? `${text[0].toUpperCase()}${text.slice(1)}.` : '';
  }

  /** Accept (optionally always from this sender) or decline an incoming file that waits for an answer. */
  async function answer(transfer, accept, always) {
    if (state.answering.has(transfer.id)) return;
    state.answering.add(transfer.id);
    state.problems.delete(transfer.id);
    render();
    try {
      const id = encodeURIComponent(transfer.id);
      const result = accept
        ? await call(`transfers/${id}/accept`, { method: 'POST', body: always ? { always: true } : {} })
        : await call(`transfers/${id}/decline`, { method: 'POST' });
      if (result && result.transfer) upsert(result.transfer);
    } catch (err) {
      if (err.status === 409) {
        state.problems.set(transfer.id, `Too late: ${err.message}.`);
        load(); // the node has its final state
      } else {
        state.problems.set(transfer.id, `Could not ${accept ? 'accept' : 'decline'}: ${err.message}`);
      }
    } finally {
      state.answering.delete(transfer.id);
    }
    if (always) loadConsent(); // the sender may be on the list even when the answer came too late
    render();
  }

  /** The node's consent mode and this peer's always-accept list. */
  async function loadConsent() {
    if (!deps.hasPath('/api/v1/file-consent')) return;
    try {
      const result = await call('file-consent');
      state.consent = (result && result.fileConsent) || null;
    } catch {
      return; // shown as it was; the next hello asks again
    }
    render();
  }

  async function removeAlways(entry, button) {
    button.disabled = true;
    try {
      const result = await call(`file-consent/always-accept/${encodeURIComponent(entry.peerId)}`, { method: 'DELETE' });
      state.consent = (result && result.fileConsent) || state.consent;
    } catch (err) {
      if (err.status !== 404) showError(el.error, `Could not remove ${entry.displayName}: ${err.message}`);
      await loadConsent();
    }
    render();
  }

  /** Wires one Accept / Decline / "always" group (in a prompt or a transfer row) to the transfer in `idOf()`. */
  function consentControls(prefix, idOf) {
    const always = h('input', { type: 'checkbox', className: 'checkbox', dataset: { testid: `${prefix}-always` } });
    const alwaysLabel = h('span', { dataset: { testid: `${prefix}-always-label` } });
    const accept = h('button', { type: 'button', className: 'button button-primary', dataset: { testid: `${prefix}-accept` } }, 'Accept');
    const decline = h('button', { type: 'button', className: 'button', dataset: { testid: `${prefix}-decline` } }, 'Decline');
    const act = (yes, button) => {
      const transfer = state.transfers.get(idOf());
      if (!transfer || transfer.state !== 'awaitingConsent') return;
      // The buttons are disabled while the node answers (a disabled button loses the focus to <body>): the
      // prompt or row holds the focus and shows the result; a prompt that goes hands it to the next one.
      const holder = button.closest('li');
      if (holder) {
        holder.tabIndex = -1;
        holder.focus({ preventScroll: true });
      }
      answer(transfer, yes, yes && always.checked);
    };
    accept.addEventListener('click', () => act(true, accept));
    decline.addEventListener('click', () => act(false, decline));
    return h(
      'div',
      { className: 'consent', dataset: { testid: `${prefix}-consent` } },
      h('label', { className: 'check' }, always, alwaysLabel),
      h('div', { className: 'button-row' }, accept, decline),
    );
  }

  function updateConsentControls(root, prefix, transfer) {
    const busy = state.answering.has(transfer.id);
    const sender = peerName(transfer.from);
    setText(root.querySelector(`[data-testid="${prefix}-always-label"]`), `Always accept files from ${sender}`);
    const accept = root.querySelector(`[data-testid="${prefix}-accept"]`);
    const decline = root.querySelector(`[data-testid="${prefix}-decline"]`);
    accept.disabled = busy;
    decline.disabled = busy;
    accept.setAttribute('aria-label', `Accept ${transfer.name} from ${sender}`);
    decline.setAttribute('aria-label', `Decline ${transfer.name} from ${sender}`);
  }

  function renderPrompts() {
    const waiting = deps.signedIn() ? awaiting() : [];
    syncList(
      el.promptList,
      waiting,
      (t) => t.id,
      (t) => {
        const id = t.id;
        const row = h(
          'li',
          { className: 'prompt', dataset: { testid: 'file-prompt', transferId: id } },
          h(
            'p',
            { className: 'prompt-title', id: `file-prompt-title-${id}` },
            h('strong', { dataset: { testid: 'file-prompt-from' } }),
            ' wants to send you ',
            h('strong', { className: 'wrap', dataset: { testid: 'file-prompt-name' } }),
            ' (',
            h('span', { dataset: { testid: 'file-prompt-size' } }),
            ')',
          ),
          h('p', { className: 'hint' }, 'Nothing is stored until you accept. ', h('span', { dataset: { testid: 'file-prompt-expires' } })),
          h('p', { className: 'field-error', role: 'alert', dataset: { testid: 'file-prompt-error' }, hidden: true }),
          consentControls('file-prompt', () => id),
        );
        animateIn(row);
        return row;
      },
      (row, t) => {
        setText(row.querySelector('[data-testid="file-prompt-from"]'), peerName(t.from));
        setText(row.querySelector('[data-testid="file-prompt-name"]'), t.name);
        setText(row.querySelector('[data-testid="file-prompt-size"]'), formatBytes(t.size));
        setText(row.querySelector('[data-testid="file-prompt-expires"]'), promptExpiresText(t));
        showError(row.querySelector('[data-testid="file-prompt-error"]'), state.problems.get(t.id) || '');
        updateConsentControls(row, 'file-prompt', t);
      },
    );
    el.prompts.hidden = waiting.length === 0;
    countArrivals('consent', waiting.length);
  }

  function renderAlways() {
    const list = (deps.signedIn() && state.consent && state.consent.alwaysAccept) || [];
    el.always.hidden = list.length === 0;
    syncList(
      el.alwaysList,
      list,
      (e) => e.peerId,
      (e) => {
        const button = h('button', { type: 'button', className: 'button button-small', dataset: { testid: 'always-accept-remove' } }, 'Ask again');
        const row = h(
          'li',
          { className: 'row', dataset: { testid: 'always-accept-row', peerId: e.peerId } },
          h('span', { className: 'row-main' }, h('strong', { className: 'row-title', dataset: { testid: 'always-accept-name' } })),
          h('div', { className: 'button-row row-actions' }, button),
        );
        button.addEventListener('click', () => {
          const entry = ((state.consent && state.consent.alwaysAccept) || []).find((x) => x.peerId === e.peerId);
          if (entry) removeAlways(entry, button);
        });
        return row;
      },
      (row, e) => {
        setText(row.querySelector('[data-testid="always-accept-name"]'), e.displayName || e.peerId);
        row.querySelector('[data-testid="always-accept-remove"]').setAttribute('aria-label', `Ask again before accepting files from ${e.displayName}`);
      },
    );
  }

  // ------------------------------------------------------------- shared

  function renderShared() {
    el.shared.hidden = state.shared.length === 0;
    el.sharedList.replaceChildren(
      ...state.shared.map((file) =>
        h('li', { className: 'shared-file', dataset: { testid: 'shared-file' } }, h('strong', { className: 'wrap' }, file.name), ` · ${formatBytes(file.size)}`),
      ),
    );
    el.sharedSend.disabled = !deps.signedIn() || el.input.disabled;
    setText(el.sharedSend, state.shared.length === 1 ? 'Send it' : `Send all ${state.shared.length}`);
  }

  function sendShared() {
    if (!el.session.value || !el.to.value) {
      showError(el.sharedError, 'Pick a session and a connected peer to send to first.');
      return;
    }
    showError(el.sharedError, '');
    const list = state.shared;
    state.shared = [];
    sendFiles(list);
    renderShared();
  }

  // ------------------------------------------------------------- render

  function rowsInOrder() {
    // While its bytes are still going up to our node, a file's row shows the upload (even if the node has
    // announced its transfer already); then the same row shows the transfer.
    const uploads = [...state.uploads.values()].map((u) => ({ kind: 'upload', key: u.key, upload: u }));
    const uploading = new Set(uploads.map((u) => u.key));
    const transfers = [...state.transfers.values()]
      .filter((t) => !state.reasked.has(t.id))
      .sort((a, b) => String(b.createdAt).localeCompare(String(a.createdAt)))
      .map((t) => ({ kind: 'transfer', key: state.rowKeys.get(t.id) || t.id, transfer: t }))
      .filter((item) => !uploading.has(item.key));
    return [...uploads, ...transfers];
  }

  function createRow(item) {
    const row = h(
      'li',
      { className: 'row transfer-row', dataset: { testid: 'transfer-row' } },
      h(
        'div',
        { className: 'row-main' },
        h('strong', { className: 'row-title', dataset: { testid: 'transfer-name' } }),
        h('span', { className: 'row-sub', dataset: { testid: 'transfer-meta' } }),
        h('progress', { className: 'transfer-progress', max: '1', value: '0', dataset: { testid: 'transfer-progress' } }),
        h('span', { className: 'hint', dataset: { testid: 'transfer-status' } }),
      ),
      h(
        'div',
        { className: 'button-row row-actions' },
        h('button', { type: 'button', className: 'button button-small button-primary', dataset: { testid: 'transfer-download' } }, 'Download'),
        h('button', { type: 'button', className: 'button button-small button-danger', dataset: { testid: 'transfer-cancel' } }, 'Cancel'),
      ),
      h('p', { className: 'field-error row-error', role: 'alert', dataset: { testid: 'transfer-error' }, hidden: true }),
    );
    const key = item.key;
    const controls = consentControls('transfer', () => state.keyTransfers.get(key) || key);
    controls.hidden = true;
    row.querySelector('.row-error').before(controls);
    row.querySelector('[data-testid="transfer-cancel"]').addEventListener('click', () => {
      const transfer = transferByKey(key);
      const upload = state.uploads.get(key);
      if (upload && !transfer) {
        if (upload.xhr) upload.xhr.abort();
        else state.uploads.delete(key);
        render();
        return;
      }
      if (upload) {
        // The node already has a transfer for it: cancel that transfer first, then stop the upload (stopped
        // first, the cut-off upload fails the transfer and the cancel is answered 409).
        state.uploads.delete(key);
        cancel(transfer, row).finally(() => upload.xhr && upload.xhr.abort());
        return;
      }
      if (transfer) cancel(transfer, row);
    });
    row.querySelector('[data-testid="transfer-download"]').addEventListener('click', () => {
      const transfer = transferByKey(key);
      if (transfer) download(transfer, row);
    });
    animateIn(row);
    return row;
  }

  function updateRow(row, item) {
    const bar = row.querySelector('[data-testid="transfer-progress"]');
    const download = row.querySelector('[data-testid="transfer-download"]');
    const cancelButton = row.querySelector('[data-testid="transfer-cancel"]');
    if (item.kind === 'upload') {
      const u = item.upload;
      row.dataset.state = u.error ? 'failed' : 'uploading';
      row.dataset.direction = 'outgoing';
      setText(row.querySelector('[data-testid="transfer-name"]'), u.name);
      setText(row.querySelector('[data-testid="transfer-meta"]'), `to ${peerName(u.to)} · ${formatBytes(u.size)}`);
      bar.max = Math.max(1, u.size);
      bar.value = u.loaded;
      setText(
        row.querySelector('[data-testid="transfer-status"]'),
        u.error ? 'not sent' : `${STATE_TEXT.uploading} · ${formatBytes(u.loaded)} of ${formatBytes(u.size)}`,
      );
      showError(row.querySelector('[data-testid="transfer-error"]'), u.error);
      download.hidden = true;
      row.querySelector('[data-testid="transfer-consent"]').hidden = true;
      cancelButton.hidden = false;
      setText(cancelButton, u.error ? 'Dismiss' : 'Cancel');
      return;
    }
    const t = item.transfer;
    row.dataset.transferId = t.id;
    row.dataset.state = t.state;
    row.dataset.direction = t.direction;
    setText(row.querySelector('[data-testid="transfer-name"]'), t.name);
    const who = t.direction === 'outgoing' ? `to ${peerName(t.to)}` : `from ${peerName(t.from)}`;
    setText(row.querySelector('[data-testid="transfer-meta"]'), `${who} · ${formatBytes(t.size)}`);
    const size = Math.max(1, t.size || 0);
    bar.max = size;
    bar.value = t.state === 'finished' ? size : Math.min(size, t.bytes || 0);
    const stateKey = t.state === 'inProgress' && t.direction !== 'outgoing' ? 'receiving' : t.state;
    const parts = [t.state === 'interrupted' ? pausedText(t) : STATE_TEXT[stateKey] || t.state];
    const asking = t.state === 'awaitingConsent';
    // A group send's row per person says where that person is: "Waiting for Kim", "Declined by Kim", "Sent".
    const share = t.direction === 'outgoing' && Boolean(t.groupId);
    if (asking && t.direction === 'outgoing') parts[0] = share ? `Waiting for ${peerName(t.to)}` : `waiting for ${peerName(t.to)} to accept`;
    if (share && t.state === 'finished') parts[0] = 'Sent';
    if (asking && t.direction === 'incoming' && consentExpiresText(t)) parts.push(consentExpiresText(t));
    if (ACTIVE.has(t.state) && !asking) parts.push(`${formatBytes(t.bytes || 0)} of ${formatBytes(t.size)}`);
    if (t.state === 'finished' && t.sha256) parts.push(`SHA-256 ${String(t.sha256).slice(0, 12)}…`);
    if (t.state === 'declined') parts[0] = t.direction === 'outgoing' ? `Declined by ${peerName(t.to)}` : 'You declined it';
    else if ((t.state === 'failed' || t.state === 'canceled') && t.reason) parts.push(t.reason);
    setText(row.querySelector('[data-testid="transfer-status"]'), parts.join(' · '));
    download.hidden = t.state !== 'finished';
    download.setAttribute('aria-label', `Download ${t.name}`);
    const answerable = asking && t.direction === 'incoming';
    const controls = row.querySelector('[data-testid="transfer-consent"]');
    controls.hidden = !answerable;
    if (answerable) updateConsentControls(controls, 'transfer', t);
    if (answerable) showError(row.querySelector('[data-testid="transfer-error"]'), state.problems.get(t.id) || '');
    cancelButton.hidden = !ACTIVE.has(t.state) || answerable;
    setText(cancelButton, 'Cancel');
    cancelButton.setAttribute('aria-label', `Cancel ${t.name}`);
  }

  /** "Paused: beta unreachable since 11:48 PM · resumes by itself" for an interrupted transfer. */
  function pausedText(t) {
    const paused = state.paused.get(t.id) || {};
    const other = t.direction === 'outgoing' ? t.to : t.from;
    const nodeId = paused.nodeId || (other && other.nodeId);
    const since = paused.since || (deps.nodeLostAt && deps.nodeLostAt(nodeId)) || Date.parse(t.updatedAt);
    const name = deps.nodeLabel ? deps.nodeLabel(nodeId) : 'the other node';
    const time = Number.isFinite(since) ? ` since ${new Date(since).toLocaleTimeString([], { hour: 'numeric', minute: '2-digit' })}` : '';
    return `Paused: ${name} unreachable${time} · resumes by itself`;
  }

  /** Whether a refusal is a receiving node's file consent (`--file-consent ask`), which asking each one answers. */
  function refusedForConsent(reason) {
    return /file-consent ask|asks before a file is stored/.test(String(reason || ''));
  }

  /** One line per group send of ours: how many recipients, finished, declined, not answered, failed, still going. */
  function renderGroups() {
    const groups = new Map();
    for (const t of state.transfers.values()) {
      if (t.direction !== 'outgoing' || state.reasked.has(t.id)) continue;
      const groupId = t.groupId || state.askGroups.get(state.rowKeys.get(t.id));
      if (!groupId) continue;
      const group = groups.get(groupId) || { id: groupId, name: t.name, createdAt: t.createdAt, all: [] };
      group.all.push(t);
      groups.set(groupId, group);
    }
    const items = [...groups.values()].sort((a, b) => String(b.createdAt).localeCompare(String(a.createdAt)));
    syncList(
      el.groups,
      items,
      (g) => g.id,
      () => h('li', { className: 'row group-summary', dataset: { testid: 'group-summary' } }),
      (row, g) => {
        const count = (state) => g.all.filter((t) => t.state === state).length;
        const asking = count('awaitingConsent');
        const going = g.all.filter((t) => ACTIVE.has(t.state)).length - asking;
        const names = (state) => g.all.filter((t) => t.state === state).map((t) => peerName(t.to)).join(', ');
        row.dataset.groupId = g.id;
        row.dataset.finished = String(count('finished'));
        row.dataset.declined = String(count('declined'));
        row.dataset.asking = String(asking);
        setText(
          row,
          [
            `${g.name} to ${g.all.length} people: ${count('finished')} finished, ${count('failed')} failed, `
              + `${count('canceled')} canceled, ${going} in progress`,
            count('declined') ? `declined by ${names('declined')}` : '',
            asking ? `not answered yet: ${names('awaitingConsent')}` : '',
          ]
            .filter(Boolean)
            .join(' · '),
        );
      },
    );
  }

  function render() {
    renderPickers();
    renderGroups();
    const items = deps.signedIn() ? rowsInOrder() : [];
    syncList(el.list, items, (i) => i.key, createRow, updateRow);
    el.empty.hidden = items.length > 0;
    renderShared();
    renderPrompts();
    renderArrivals();
    renderAlways();
    renderBadge();
    if (deps.onChange) deps.onChange();
  }

  /**
   * How the files sent under these row keys (``sendTo``'s answer) are doing, for the Nearby row of their
   * recipient: {phase: 'sending'|'paused'|'sent'|'failed', text, done, total}, or null when none is known.
   */
  function progressOf(keys, to) {
    const items = [];
    for (const key of keys) {
      const upload = state.uploads.get(key);
      const transfer = transferByKey(key);
      if (upload && !transfer) items.push({ name: upload.name, size: upload.size, done: 0, state: upload.error ? 'failed' : 'uploading', reason: upload.error });
      else if (transfer) items.push({ name: transfer.name, size: transfer.size, done: transfer.state === 'finished' ? transfer.size : transfer.bytes || 0, state: transfer.state, reason: transfer.reason, transfer });
    }
    if (items.length === 0) return null;
    const what = items.length === 1 ? items[0].name : `${items.length} files`;
    const total = items.reduce((sum, i) => sum + (i.size || 0), 0);
    const done = items.reduce((sum, i) => sum + Math.min(i.size || 0, i.done || 0), 0);
    const paused = items.find((i) => i.state === 'interrupted');
    const failed = items.filter((i) => ['failed', 'canceled', 'declined'].includes(i.state));
    if (items.some((i) => ACTIVE.has(i.state) || i.state === 'uploading')) {
      if (paused) return { phase: 'paused', text: pausedText(paused.transfer), done, total };
      const asking = items.find((i) => i.state === 'awaitingConsent');
      if (asking) return { phase: 'sending', text: `Waiting for ${to} to accept ${asking.name}`, done, total };
      return { phase: 'sending', text: `Sending ${what} to ${to}…`, done, total };
    }
    if (failed.length === 0) return { phase: 'sent', text: `Sent ${what} to ${to}`, done: total, total };
    const first = failed[0];
    const why = first.state === 'declined' ? `declined by ${to}` : first.reason || first.state;
    const sent = items.length - failed.length;
    return {
      phase: 'failed',
      text: sent > 0 ? `Sent ${sent} of ${items.length} files to ${to}; ${first.name}: ${why}` : `${first.name} not sent: ${why}`,
      done,
      total,
    };
  }

  // ------------------------------------------------------------- events

  function onEvent(event) {
    if (!event.type.startsWith('transfer.')) return;
    const data = event.data && typeof event.data === 'object' ? event.data : {};
    if (!data.transfer) return;
    const transfer = { ...data.transfer };
    if (event.type === 'transfer.progress' && Number.isFinite(data.bytes)) transfer.bytes = data.bytes;
    if (event.type === 'transfer.interrupted') {
      const since = Date.parse(event.at);
      state.paused.set(transfer.id, { nodeId: data.nodeId, since: Number.isFinite(since) ? since : Date.now() });
    } else if (transfer.state !== 'interrupted') {
      state.paused.delete(transfer.id);
    }
    if (event.type === 'transfer.offered' && transfer.direction === 'incoming') {
      if (Number.isFinite(data.timeoutSeconds)) state.deadlines.set(transfer.id, Date.now() + data.timeoutSeconds * 1000);
      if (!state.transfers.has(transfer.id) && transfer.state === 'awaitingConsent' && takeExpected(transfer)) {
        // Already agreed to with the invitation that said it was coming: not asked a second time.
        announce(`${peerName(transfer.from)} is sending you ${transfer.name} (${formatBytes(transfer.size)}), as you accepted.`);
        state.accepting.add(transfer.id);
        upsert(transfer);
        // Should the accept fail, the file is asked about after all (with why).
        answer(transfer, true, false).finally(() => {
          state.accepting.delete(transfer.id);
          render();
        });
        return;
      }
      if (!state.transfers.has(transfer.id)) {
        arrive(`${peerName(transfer.from)} wants to send you ${transfer.name} (${formatBytes(transfer.size)}): accept or decline it.`, {
          tag: `transfer-${transfer.id}`,
        });
      }
    }
    if (event.type === 'transfer.declined' && transfer.direction === 'outgoing') {
      announce(`${peerName(transfer.to)} declined ${transfer.name}.`);
    }
    if (transfer.state !== 'awaitingConsent') state.deadlines.delete(transfer.id);
    if (event.type === 'transfer.started' && transfer.direction === 'incoming' && !state.transfers.has(transfer.id)) {
      arrive(`${peerName(transfer.from)} is sending you ${transfer.name} (${formatBytes(transfer.size)}).`, { tag: `transfer-${transfer.id}` });
      if (!state.visible) {
        state.unseen.add(transfer.id);
        renderBadge();
      }
    }
    if (event.type === 'transfer.finished' && transfer.direction === 'incoming' && !state.arrived.has(transfer.id)) {
      const known = state.transfers.get(transfer.id);
      if (!known || known.state !== 'finished') {
        state.arrived.set(transfer.id, transfer);
        arrive(`${transfer.name} from ${peerName(transfer.from)} arrived. Download it from the card at the top or in Files.`, {
          tag: `transfer-${transfer.id}`,
        });
      }
    }
    upsert(transfer);
    render();
  }

  /** The Files tab's badge and the title's count: incoming files not seen yet. */
  function renderBadge() {
    // New files not seen yet, plus files waiting for an answer (counted in the title as "consent").
    const fresh = state.unseen.size;
    const asking = deps.signedIn() ? awaiting().length : 0;
    const n = fresh + asking;
    el.badge.hidden = n === 0;
    setText(el.badge, String(n));
    const words = [];
    if (fresh > 0) words.push(fresh === 1 ? '1 new file' : `${fresh} new files`);
    if (asking > 0) words.push(`${asking} waiting for your answer`);
    el.badge.setAttribute('aria-label', words.join(', '));
    countArrivals('files', fresh);
  }

  // ------------------------------------------------------ public surface

  return {
    init() {
      el.session.addEventListener('change', renderPickers);
      el.to.addEventListener('change', renderPickers);
      el.input.addEventListener('change', () => {
        sendFiles([...el.input.files]);
        el.input.value = '';
      });
      // The drop zone is also a button: Enter or Space opens the file picker.
      const openPicker = () => {
        if (!el.input.disabled) el.input.click();
      };
      el.drop.addEventListener('click', openPicker);
      el.drop.addEventListener('keydown', (event) => {
        if (event.key === 'Enter' || event.key === ' ') {
          event.preventDefault();
          openPicker();
        }
      });
      el.drop.addEventListener('dragover', (event) => {
        event.preventDefault();
        el.drop.classList.add('is-over');
      });
      el.sharedSend.addEventListener('click', sendShared);
      el.sharedDiscard.addEventListener('click', () => {
        state.shared = [];
        showError(el.sharedError, '');
        renderShared();
      });
      el.drop.addEventListener('dragleave', () => el.drop.classList.remove('is-over'));
      el.drop.addEventListener('drop', (event) => {
        event.preventDefault();
        el.drop.classList.remove('is-over');
        if (event.dataTransfer && event.dataTransfer.files.length > 0) sendFiles([...event.dataTransfer.files]);
      });
      render();
    },
    signIn() {
      for (const upload of state.uploads.values()) if (upload.xhr) upload.xhr.abort();
      state.transfers.clear();
      state.uploads.clear();
      state.rowKeys.clear();
      state.keyTransfers.clear();
      state.unseen.clear();
      state.deadlines.clear();
      state.paused.clear();
      state.arrived.clear();
      state.askGroups.clear();
      state.reasked.clear();
      state.answering.clear();
      state.accepting.clear();
      state.problems.clear();
      state.consent = null;
      state.expected = [];
      renderBadge();
      render();
    },
    /** The Files view was shown (`true`) or left: shown, its new files count as seen. */
    shown(visible) {
      state.visible = visible;
      if (visible && state.unseen.size > 0) {
        state.unseen.clear();
        renderBadge();
      }
    },
    signOut() {
      this.signIn();
    },
    async load() {
      await Promise.allSettled([load(), loadConsent()]);
    },
    onEvent,
    /** Twice a second: the consent countdowns. */
    tick() {
      if (state.deadlines.size === 0) return;
      for (const row of el.promptList.children) {
        const t = state.transfers.get(row.dataset.key);
        if (t) setText(row.querySelector('[data-testid="file-prompt-expires"]'), promptExpiresText(t));
      }
    },
    /** An invitation saying "<from> wants to send you <what>" was accepted: those files are not asked about again. */
    expect,
    /** Files shared to the dashboard (share target): shown ready to send, or why none arrived. */
    setShared({ files, problem }) {
      state.shared = [...files];
      showError(el.sharedError, problem || '');
      render();
    },
    /** Sends files to `to` in session `sessionId` (the one-step send from a nearby peer's row). */
    sendTo(sessionId, to, list) {
      const keys = list.map((file) => upload(file, sessionId, to));
      render();
      return keys;
    },
    progressOf,
    /** Sessions changed (members joined, left, connected): refresh the pickers. */
    render,
  };
}
