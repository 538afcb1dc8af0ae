// meshgate dashboard: the Files view. Pick or drop files to send to a member
// of one of your sessions; progress bars on both sides; cancel; download when
// finished. Created by dashboard.js, which hands it its helpers and forwards
// the socket's hello and events.
//
// REST: POST /sessions/{id}/resources?to=&name= (raw body) → 202 {transfer};
// GET /transfers; DELETE /transfers/{id}; GET /transfers/{id}/content.
// Events: transfer.started | progress | finished | failed | canceled, each
// with data.transfer.
//
// The upload to our own node is an XMLHttpRequest (fetch has no upload
// progress); from then on the node reports the delivery to the receiver's node.

import { announce, count as countArrivals } from './arrivals.js';

const HISTORY_PAGE = 200;
const HISTORY_MAX_PAGES = 5;
const ACTIVE = new Set(['pending', 'inProgress', 'interrupted']);
const STATE_TEXT = {
  uploading: 'uploading to your node',
  pending: 'waiting for the receiver',
  inProgress: 'sending',
  receiving: 'receiving',
  interrupted: 'interrupted: resumes when the link is back',
  finished: 'finished',
  failed: 'failed',
  canceled: 'canceled',
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
  };

  const el = {
    session: byTestId('file-session'),
    to: byTestId('file-to'),
    drop: byTestId('file-drop'),
    input: byTestId('file-input'),
    error: byTestId('file-error'),
    list: byTestId('transfers-list'),
    empty: byTestId('transfers-empty'),
    badge: byTestId('files-badge'),
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

  function renderPickers() {
    const sessions = deps.signedIn() ? connectedSessions() : [];
    fillSelect(
      el.session,
      sessions,
      (s) => s.id,
      (s) => {
        const others = (s.members || []).filter((m) => !mine(m)).map((m) => peerName(m));
        return `Session ${String(s.id).slice(0, 8)} · with ${others.join(', ')}`;
      },
      'No session with a connected peer: start one in Sessions',
    );
    const session = sessions.find((s) => s.id === el.session.value);
    const members = session ? (session.members || []).filter((m) => !mine(m) && m.state === 'connected') : [];
    fillSelect(el.to, members, (m) => m.id, (m) => peerName(m), 'No one connected');
    const ready = members.length > 0;
    el.drop.setAttribute('aria-disabled', ready ? 'false' : 'true');
    el.drop.classList.toggle('is-disabled', !ready);
    el.input.disabled = !ready;
  }

  // ------------------------------------------------------------- upload

  function sendFiles(files) {
    showError(el.error, '');
    const sessionId = el.session.value;
    const to = el.to.value;
    if (!sessionId || !to) {
      showError(el.error, 'Pick a session and a connected peer to send to first.');
      return;
    }
    for (const file of files) upload(file, sessionId, to);
  }

  function upload(file, sessionId, to) {
    state.uploadSeq += 1;
    const key = `u${state.uploadSeq}`;
    const member = deps.sessions().find((s) => s.id === sessionId)?.members?.find((m) => m.id === to);
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
      if (xhr.status >= 200 && xhr.status < 300 && payload && payload.transfer) {
        state.uploads.delete(key);
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
  }

  // ---------------------------------------------------------- transfers

  function upsert(transfer) {
    if (!transfer || !transfer.id) return;
    const known = state.transfers.get(transfer.id);
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
  async function download(transfer, row) {
    const error = row.querySelector('[data-testid="transfer-error"]');
    const button = row.querySelector('[data-testid="transfer-download"]');
    showError(error, '');
    button.disabled = true;
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
      const blob = await response.blob();
      const url = URL.createObjectURL(blob);
      const link = h('a', { href: url, download: transfer.name, hidden: true });
      document.body.append(link);
      link.click();
      link.remove();
      window.setTimeout(() => URL.revokeObjectURL(url), 60_000);
      row.dataset.downloaded = 'true';
    } catch (err) {
      showError(error, `Could not download: ${err.message}`);
    } finally {
      button.disabled = false;
    }
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

  // ------------------------------------------------------------- render

  function rowsInOrder() {
    const uploads = [...state.uploads.values()].map((u) => ({ kind: 'upload', key: u.key, upload: u }));
    const transfers = [...state.transfers.values()]
      .sort((a, b) => String(b.createdAt).localeCompare(String(a.createdAt)))
      .map((t) => ({ kind: 'transfer', key: t.id, transfer: t }));
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
    row.querySelector('[data-testid="transfer-cancel"]').addEventListener('click', () => {
      const upload = state.uploads.get(key);
      if (upload) {
        if (upload.xhr) upload.xhr.abort();
        else state.uploads.delete(key);
        render();
        return;
      }
      const transfer = state.transfers.get(key);
      if (transfer) cancel(transfer, row);
    });
    row.querySelector('[data-testid="transfer-download"]').addEventListener('click', () => {
      const transfer = state.transfers.get(key);
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
    const parts = [STATE_TEXT[stateKey] || t.state];
    if (ACTIVE.has(t.state)) parts.push(`${formatBytes(t.bytes || 0)} of ${formatBytes(t.size)}`);
    if (t.state === 'finished' && t.sha256) parts.push(`SHA-256 ${String(t.sha256).slice(0, 12)}…`);
    if ((t.state === 'failed' || t.state === 'canceled') && t.reason) parts.push(t.reason);
    setText(row.querySelector('[data-testid="transfer-status"]'), parts.join(' · '));
    download.hidden = t.state !== 'finished';
    download.setAttribute('aria-label', `Download ${t.name}`);
    cancelButton.hidden = !ACTIVE.has(t.state);
    setText(cancelButton, 'Cancel');
    cancelButton.setAttribute('aria-label', `Cancel ${t.name}`);
  }

  function render() {
    renderPickers();
    const items = deps.signedIn() ? rowsInOrder() : [];
    syncList(el.list, items, (i) => i.key, createRow, updateRow);
    el.empty.hidden = items.length > 0;
  }

  // ------------------------------------------------------------- events

  function onEvent(event) {
    if (!event.type.startsWith('transfer.')) return;
    const data = event.data && typeof event.data === 'object' ? event.data : {};
    if (!data.transfer) return;
    const transfer = { ...data.transfer };
    if (event.type === 'transfer.progress' && Number.isFinite(data.bytes)) transfer.bytes = data.bytes;
    if (event.type === 'transfer.started' && transfer.direction === 'incoming' && !state.transfers.has(transfer.id)) {
      announce(`${peerName(transfer.from)} is sending you ${transfer.name} (${formatBytes(transfer.size)}).`);
      if (!state.visible) {
        state.unseen.add(transfer.id);
        renderBadge();
      }
    }
    upsert(transfer);
    render();
  }

  /** The Files tab's badge and the title's count: incoming files not seen yet. */
  function renderBadge() {
    const n = state.unseen.size;
    el.badge.hidden = n === 0;
    setText(el.badge, String(n));
    el.badge.setAttribute('aria-label', n === 1 ? '1 new file' : `${n} new files`);
    countArrivals('files', n);
  }

  // ------------------------------------------------------ public surface

  return {
    init() {
      el.session.addEventListener('change', renderPickers);
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
      state.unseen.clear();
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
    load,
    onEvent,
    /** Sessions changed (members joined, left, connected): refresh the pickers. */
    render,
  };
}
