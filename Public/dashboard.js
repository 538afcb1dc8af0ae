// meshgate dashboard views: Nearby, Jobs, Invitations, Sessions, and the
// incoming-invitation prompts. Imported by app.js, which owns sign-in, the
// event socket and the event log, and hands this module its helpers (so
// there is one copy of the REST client and the DOM helpers).
//
// State is loaded over REST when a socket says hello (first connect and every
// reconnect) and then kept current by the events app.js passes to onEvent().
// Every list is keyed: rows are updated in place, so focus and half-typed text
// in a row survive live updates.

import { CHAT_SERVICE, createChat } from './chat.js';
import { createFiles, formatBytes } from './files.js';
import { arrive, count as countArrivals } from './arrivals.js';

const JOBS_SERVICE = 'jobmanager-jobs';
const MESH_REFRESH_MS = 5_000;
const SESSION_REFRESH_DEBOUNCE_MS = 150;
const LEAVE_ANIMATION_MS = 400;
const CONFIRM_MS = 4_000;
const MAX_MESSAGES_PER_SESSION = 200;
const KEY_VIEW = 'meshgate.view';
const KEY_DEVELOPER = 'meshgate.developer';
const DRAFT_PREFIX = 'meshgate.draft.';
const VIEWS = ['nearby', 'jobs', 'chat', 'files', 'invitations', 'sessions', 'events'];
const JOB_FIELDS = { name: 'job-name', dueDate: 'job-due', payment: 'job-payment', notes: 'job-notes' };
/** Session member states as people say them (the API's `notConnected` is "offline"). */
const MEMBER_STATE_LABELS = { connected: 'connected', connecting: 'connecting…', notConnected: 'offline' };
/** The server's limit on a job name, in characters (Swift `Character`s: extended grapheme clusters). */
const MAX_JOB_NAME_CHARACTERS = 200;
const graphemes = typeof Intl !== 'undefined' && Intl.Segmenter ? new Intl.Segmenter(undefined, { granularity: 'grapheme' }) : null;

/** Characters as the server counts them (grapheme clusters; code points where Intl.Segmenter is missing). */
function characterCount(text) {
  if (!graphemes) return [...text].length;
  let count = 0;
  for (const _ of graphemes.segment(text)) count += 1;
  return count;
}

/**
 * @param {object} deps helpers from app.js: h, api, ApiError, setText, byTestId, storage
 */
export function createDashboard({ h, api, ApiError, setText, byTestId, storage }) {
  const reducedMotion = window.matchMedia('(prefers-reduced-motion: reduce)');

  // -------------------------------------------------------------- state
  const state = {
    token: null,
    me: null,
    /** Bumped on sign-in/out so late responses for an old peer are dropped. */
    generation: 0,
    receiving: false,
    /** Everyone signed in nearby (presence; without it, the peers receiving jobs): peerId → {peer}. */
    nearby: new Map(),
    /** The peers receiving jobs (advertising jobmanager-jobs): peerId → {peer, discoveryInfo}. */
    jobPeers: new Map(),
    /** Other browsed service types: type → Map(peerId → {peer, discoveryInfo}). */
    services: new Map(),
    meshSelf: null,
    meshNodes: [],
    // Nodes seen linked since the page opened, by id: {node, lostAt}. A node that leaves the node's list (or
    // stops being linked) stays shown as "unreachable since HH:MM" instead of vanishing.
    meshSeen: new Map(),
    meshAt: 0,
    jobs: new Map(), // jobId → job
    /** jobId → {invitationId, code, to} while an offer is pending; or {failure}. */
    jobOffers: new Map(),
    invitations: new Map(), // id → invitation
    /** Ids of job offers accepted here: their prompt stays, saying "Added to your Jobs", until dismissed. */
    acceptedOffers: new Set(),
    /** Nearby peer id → a one-step send under way: {phase, status, files?, what?, sessionId?, invitationId?}. */
    directSends: new Map(),
    /** The nearby peer "Offer job" was pressed for: the next job added is offered to them. */
    offerTo: null,
    /** invitation id → message shown on its prompt after a failed answer. */
    promptProblems: new Map(),
    sessions: new Map(), // id → session
    messages: new Map(), // sessionId → [{id, from, text, at, mine}]
    editingJobId: null,
    view: 'nearby',
    /** API paths this node serves (from its OpenAPI document), so views of newer APIs show only where they work. */
    paths: null,
  };

  const el = {
    prompts: byTestId('invitation-prompts'),
    promptList: byTestId('prompt-list'),
    tabs: [...document.querySelectorAll('[role="tab"][data-view]')],
    invitationsBadge: byTestId('invitations-badge'),
    receiveJobs: byTestId('receive-jobs'),
    receiveStatus: byTestId('receive-jobs-status'),
    nearbyEmpty: byTestId('nearby-empty'),
    nearbyList: byTestId('nearby-list'),
    meshSelf: byTestId('mesh-self'),
    meshEmpty: byTestId('mesh-empty'),
    meshList: byTestId('mesh-list'),
    meshUpdated: byTestId('mesh-updated'),
    browseForm: byTestId('browse-form'),
    browseType: byTestId('browse-type'),
    browseError: byTestId('browse-error'),
    servicesEmpty: byTestId('services-empty'),
    servicesList: byTestId('services-list'),
    jobForm: byTestId('job-form'),
    jobFormTitle: byTestId('job-form-title'),
    jobSubmit: byTestId('job-submit'),
    jobCancelEdit: byTestId('job-cancel-edit'),
    jobFormError: byTestId('job-form-error'),
    jobsList: byTestId('jobs-list'),
    jobsEmpty: byTestId('jobs-empty'),
    jobsCount: byTestId('jobs-count'),
    incomingList: byTestId('incoming-list'),
    incomingEmpty: byTestId('incoming-empty'),
    outgoingList: byTestId('outgoing-list'),
    outgoingEmpty: byTestId('outgoing-empty'),
    sessionCreate: byTestId('session-create'),
    sessionsError: byTestId('sessions-error'),
    sessionsList: byTestId('sessions-list'),
    sessionsEmpty: byTestId('sessions-empty'),
  };

  // ------------------------------------------------------------ helpers

  const signedIn = () => Boolean(state.token);
  /** While leaving, nothing new is asked of the node: the token is about to stop working. */
  const call = (path, options = {}) =>
    state.paused
      ? Promise.reject(new ApiError(0, 'paused', 'Leaving the mesh…'))
      : api(path, { ...options, token: state.token });

  /** Run `fn` only if the peer has not changed meanwhile. */
  function guard(fn) {
    const generation = state.generation;
    return (...args) => (generation === state.generation ? fn(...args) : undefined);
  }

  function showError(node, message) {
    node.hidden = !message;
    setText(node, message || '');
  }

  function shortId(id) {
    return id ? String(id).slice(0, 8) : '—';
  }

  function nodeLabel(nodeId) {
    const seen = state.meshSeen.get(nodeId);
    return seen && seen.node && seen.node.name ? seen.node.name : nodeName(nodeId);
  }

  function nodeName(nodeId) {
    if (!nodeId) return 'unknown node';
    if (state.meshSelf && state.meshSelf.id === nodeId) return `${state.meshSelf.name || shortId(nodeId)} (this node)`;
    const node = state.meshNodes.find((n) => n.id === nodeId);
    return node && node.name ? node.name : `node ${shortId(nodeId)}`;
  }

  function peerName(ref) {
    if (!ref) return 'someone';
    return ref.displayName || shortId(ref.id);
  }

  function isIncoming(invitation) {
    return Boolean(state.me && invitation.to && invitation.to.id === state.me.id);
  }

  /**
   * Keyed list sync: rows carry data-key; new keys get create(item), existing
   * ones update(row, item), and rows whose key is gone are removed (through
   * `leave` when given, for exit animations). Order follows `items`.
   */
  function syncList(list, items, keyOf, create, update, leave) {
    const existing = new Map();
    for (const row of list.children) {
      if (!row.classList.contains('is-leaving')) existing.set(row.dataset.key, row);
    }
    const wanted = new Set();
    let cursor = list.firstElementChild;
    for (const item of items) {
      const key = String(keyOf(item));
      wanted.add(key);
      let row = existing.get(key);
      if (!row) {
        row = create(item);
        row.dataset.key = key;
      }
      update(row, item);
      while (cursor && cursor.classList.contains('is-leaving')) cursor = cursor.nextElementSibling;
      if (row !== cursor) list.insertBefore(row, cursor);
      else cursor = cursor.nextElementSibling;
    }
    let rescue = null;
    for (const [key, row] of existing) {
      if (wanted.has(key)) continue;
      // The focus is in a row that goes: it moves to the row after it (or before it), never to <body>.
      if (row.contains(document.activeElement)) rescue = { next: row.nextElementSibling, previous: row.previousElementSibling };
      if (leave) leave(row);
      else row.remove();
    }
    if (rescue) moveFocusNear(list, rescue);
  }

  /** Focus the first control of the nearest row that stays in `list`, else the tab of the view shown. */
  function moveFocusNear(list, { next, previous }) {
    const usable = (row) => row && row.parentNode === list && !row.classList.contains('is-leaving');
    const control = (row) =>
      [...row.querySelectorAll('button, a[href], input, select, textarea, [tabindex="-1"]')].find(
        (e) => !e.disabled && !e.hidden && e.getClientRects().length > 0,
      );
    for (let row = next; row; row = row.nextElementSibling) if (usable(row) && control(row)) return control(row).focus();
    for (let row = previous; row; row = row.previousElementSibling) if (usable(row) && control(row)) return control(row).focus();
    focusCurrentTab();
  }

  function focusCurrentTab() {
    const tab = document.querySelector('.tab[aria-selected="true"]');
    if (tab) tab.focus({ preventScroll: true });
  }

  /** Give a row an enter animation (skipped for reduced motion). */
  function animateIn(row) {
    if (reducedMotion.matches) return;
    row.classList.add('is-entering');
    row.addEventListener('animationend', () => row.classList.remove('is-entering'), { once: true });
  }

  function animateOut(row) {
    if (reducedMotion.matches) {
      row.remove();
      return;
    }
    row.classList.remove('is-entering');
    row.classList.add('is-leaving');
    row.setAttribute('aria-hidden', 'true');
    const done = () => row.remove();
    row.addEventListener('animationend', done, { once: true });
    window.setTimeout(done, LEAVE_ANIMATION_MS + 100);
  }

  /** Replace a <select>'s options with the nearby peers, keeping the choice. */
  function fillPeerSelect(select, { exclude = new Set(), jobsOnly = false } = {}) {
    const current = select.value;
    const pool = jobsOnly ? state.jobPeers : state.nearby;
    const peers = [...pool.values()].filter((entry) => !exclude.has(entry.peer.id));
    const signature = peers.map((e) => `${e.peer.id}:${e.peer.displayName}`).join('|');
    if (select.dataset.signature !== signature) {
      select.dataset.signature = signature;
      const options = peers.map((entry) =>
        h('option', { value: entry.peer.id }, `${peerName(entry.peer)} · ${nodeName(entry.peer.nodeId)}`),
      );
      if (options.length === 0) {
        options.push(h('option', { value: '' }, jobsOnly ? 'No one nearby is receiving jobs' : 'No one else is nearby'));
      }
      select.replaceChildren(...options);
      if (peers.some((e) => e.peer.id === current)) select.value = current;
    }
    select.disabled = peers.length === 0;
    return peers.length;
  }

  /** A two-step button: first press arms it, second press within 4 s acts. */
  function confirmButton(button, label, armedLabel, action) {
    let timer = 0;
    button.addEventListener('click', () => {
      if (button.dataset.armed !== 'true') {
        button.dataset.armed = 'true';
        button.textContent = armedLabel;
        timer = window.setTimeout(() => {
          button.dataset.armed = 'false';
          button.textContent = label;
        }, CONFIRM_MS);
        return;
      }
      window.clearTimeout(timer);
      button.dataset.armed = 'false';
      button.textContent = label;
      action();
    });
  }

  // ------------------------------------------------------------- drafts
  //
  // Typed text is never lost: the job form and every composer save what is typed
  // to localStorage (per peer) as it is typed, get it back after a reload, a
  // reconnect or a re-render, and forget it only once the node has taken it.

  function draftKey(name) {
    return state.me && state.me.id ? `${DRAFT_PREFIX}${state.me.id}.${name}` : null;
  }

  function getDraft(name) {
    const key = draftKey(name);
    return key ? storage.get(key) || '' : '';
  }

  function setDraft(name, value) {
    const key = draftKey(name);
    if (!key) return;
    if (value) storage.set(key, value);
    else storage.remove(key);
  }

  /** Restore a field's draft (unless it holds text already) and save it on every keystroke. */
  function bindDraft(input, name) {
    input.dataset.draft = name;
    if (!input.value) input.value = getDraft(name);
    input.addEventListener('input', () => setDraft(input.dataset.draft, input.value));
  }

  /** Forget every draft of the current peer (it left the mesh for good). */
  function forgetDrafts() {
    const prefix = draftKey('');
    if (!prefix) return;
    try {
      for (let i = window.localStorage.length - 1; i >= 0; i -= 1) {
        const key = window.localStorage.key(i);
        if (key && key.startsWith(prefix)) storage.remove(key);
      }
    } catch {
      // Storage unavailable: there is nothing to forget.
    }
  }

  // --------------------------------------------------------------- chat

  const chat = createChat({
    h,
    call: (path, options) => call(path, options),
    setText,
    byTestId,
    storage,
    syncList,
    animateIn,
    animateOut,
    getDraft,
    setDraft,
    bindDraft,
    guard,
    peerName,
    nodeName,
    showError,
    me: () => state.me,
    signedIn,
    nodeReachable,
    isViewVisible: () => state.view === 'chat' && document.visibilityState === 'visible',
  });

  // -------------------------------------------------------------- files

  const files = createFiles({
    h,
    call: (path, options) => call(path, options),
    apiUrl(path, query = {}) {
      const url = new URL(`api/v1/${path}`, document.baseURI);
      for (const [name, value] of Object.entries(query)) {
        if (value !== undefined && value !== null && value !== '') url.searchParams.set(name, String(value));
      }
      return url;
    },
    token: () => state.token,
    setText,
    byTestId,
    syncList,
    animateIn,
    guard,
    peerName,
    showError,
    me: () => state.me,
    signedIn,
    sessions: () => [...state.sessions.values()],
    hasPath: (path) => hasPath(path),
    /** Transfers or uploads changed: the Nearby rows' send lines follow. */
    onChange: () => renderDirectSends(),
    /** A node's name, also once it left the node list (it is remembered while the page is open). */
    nodeLabel: (nodeId) => nodeLabel(nodeId),
    /** When a node was seen lost (ms), or undefined while it is linked or was never seen. */
    nodeLostAt: (nodeId) => (state.meshSeen.get(nodeId) || {}).lostAt || undefined,
  });

  // ----------------------------------------------------------- features

  const hasPath = (path) => Boolean(state.paths && state.paths.has(path));

  let featuresLoading = null;

  /** Read the node's OpenAPI paths once (again after a failure); show the tabs of the APIs it has. */
  function loadFeatures() {
    if (state.paths) return Promise.resolve();
    if (!featuresLoading) featuresLoading = fetchFeatures().finally(() => (featuresLoading = null));
    return featuresLoading;
  }

  async function fetchFeatures() {
    try {
      const doc = await api('openapi.json');
      state.paths = new Set(Object.keys((doc && doc.paths) || {}));
    } catch {
      return; // the next hello asks again
    }
    for (const [view, path] of [['chat', '/api/v1/chats'], ['files', '/api/v1/transfers']]) {
      const tab = byTestId(`tab-${view}`);
      tab.hidden = !hasPath(path);
      if (tab.hidden && state.view === view) selectView('nearby');
    }
  }

  // --------------------------------------------------------------- tabs

  function selectView(view, { focus = false } = {}) {
    if (!VIEWS.includes(view)) view = 'nearby';
    // The Events view with developer views off is not shown: Nearby is. (Other tabs may still be hidden while the
    // node's features load; their views stay selectable.)
    if (view === 'events' && storage.get(KEY_DEVELOPER) !== 'on') view = 'nearby';
    for (const tab of el.tabs) {
      const selected = tab.dataset.view === view;
      tab.setAttribute('aria-selected', selected ? 'true' : 'false');
      tab.tabIndex = selected ? 0 : -1;
      document.getElementById(tab.getAttribute('aria-controls')).hidden = !selected;
      if (selected && focus) tab.focus();
    }
    state.view = view;
    storage.set(KEY_VIEW, view);
    if (view === 'chat') chat.shown();
    files.shown(view === 'files');
  }

  /** The Events tab is a developer's: shown only while "Developer: show the Events tab" is on. */
  function renderDeveloperViews() {
    const on = storage.get(KEY_DEVELOPER) === 'on';
    const toggle = byTestId('developer-views');
    if (toggle) {
      toggle.checked = on;
      toggle.setAttribute('aria-checked', on ? 'true' : 'false');
    }
    const tab = byTestId('tab-events');
    tab.hidden = !on;
    if (!on && state.view === 'events') selectView('nearby');
  }

  function initTabs() {
    const toggle = byTestId('developer-views');
    if (toggle) {
      toggle.addEventListener('change', () => {
        storage.set(KEY_DEVELOPER, toggle.checked ? 'on' : 'off');
        renderDeveloperViews();
      });
    }
    renderDeveloperViews();
    for (const tab of el.tabs) {
      tab.addEventListener('click', () => selectView(tab.dataset.view));
      tab.addEventListener('keydown', (event) => {
        const tabs = el.tabs.filter((t) => !t.hidden);
        const index = tabs.indexOf(tab);
        let next = null;
        if (event.key === 'ArrowRight') next = (index + 1) % tabs.length;
        else if (event.key === 'ArrowLeft') next = (index - 1 + tabs.length) % tabs.length;
        else if (event.key === 'Home') next = 0;
        else if (event.key === 'End') next = tabs.length - 1;
        if (next === null) return;
        event.preventDefault();
        selectView(tabs[next].dataset.view, { focus: true });
      });
    }
    selectView(storage.get(KEY_VIEW) || 'nearby');
  }

  // ------------------------------------------------------------- nearby

  async function setReceiving(on) {
    el.receiveJobs.disabled = true;
    setText(el.receiveStatus, on ? 'Turning on…' : 'Turning off…');
    try {
      if (on) await call(`advertising/${JOBS_SERVICE}`, { method: 'PUT', body: {} });
      else await call(`advertising/${JOBS_SERVICE}`, { method: 'DELETE' });
      state.receiving = on;
    } catch (err) {
      // 404 on DELETE: we were not advertising, which is what we wanted.
      if (!on && err.status === 404) state.receiving = false;
      else setText(el.receiveStatus, `Could not change Receive Jobs: ${err.message}`);
    }
    renderReceiving(true);
  }

  function renderReceiving(keepError = false) {
    el.receiveJobs.disabled = !signedIn();
    el.receiveJobs.checked = state.receiving;
    el.receiveJobs.setAttribute('aria-checked', state.receiving ? 'true' : 'false');
    if (!signedIn()) setText(el.receiveStatus, '');
    else if (!keepError || !el.receiveStatus.textContent.startsWith('Could not')) {
      setText(
        el.receiveStatus,
        state.receiving
          ? 'You are receiving jobs: nearby peers can send you job offers.'
          : 'Turn on Receive Jobs to let nearby peers offer you jobs.',
      );
    }
  }

  function renderNearby() {
    const entries = signedIn()
      ? [...state.nearby.values()].sort((a, b) => peerName(a.peer).localeCompare(peerName(b.peer)))
      : [];
    const hadRows = el.nearbyList.childElementCount > 0;
    syncList(
      el.nearbyList,
      entries,
      (e) => e.peer.id,
      (e) => {
        const row = h(
          'li',
          { className: 'row nearby-row', dataset: { testid: 'nearby-peer', peerId: e.peer.id } },
          h('span', { className: 'avatar', 'aria-hidden': 'true' }),
          h(
            'div',
            { className: 'row-main' },
            h('strong', { className: 'row-title', dataset: { testid: 'nearby-peer-name' } }),
            h('span', { className: 'row-sub', dataset: { testid: 'nearby-peer-node' } }),
            h('span', { className: 'hint nearby-status', role: 'status', dataset: { testid: 'nearby-status' } }),
            h('progress', { className: 'nearby-progress', hidden: true, dataset: { testid: 'nearby-progress' } }),
          ),
          h(
            'div',
            { className: 'button-row row-actions' },
            h('button', { type: 'button', className: 'button button-small button-primary', dataset: { testid: 'nearby-send-file' } }, 'Send file'),
            h('button', { type: 'button', className: 'button button-small', dataset: { testid: 'nearby-offer-job' } }, 'Offer job'),
            h('input', { type: 'file', multiple: true, hidden: true, tabIndex: -1, dataset: { testid: 'nearby-file-input' } }),
          ),
        );
        const id = e.peer.id;
        const input = row.querySelector('[data-testid="nearby-file-input"]');
        const sendButton = row.querySelector('[data-testid="nearby-send-file"]');
        sendButton.addEventListener('click', () => input.click());
        input.addEventListener('change', () => {
          const chosen = [...input.files];
          input.value = '';
          if (chosen.length > 0) sendFilesToPeer(id, chosen);
        });
        row.querySelector('[data-testid="nearby-offer-job"]').addEventListener('click', () => {
          const entry = state.jobPeers.get(id);
          if (entry) startJobOffer(entry.peer);
        });
        // The whole row is a drop target for files (PairDrop-style).
        row.addEventListener('dragover', (event) => {
          if (!event.dataTransfer || ![...event.dataTransfer.types].includes('Files') || sendButton.hidden) return;
          event.preventDefault();
          row.classList.add('is-over');
        });
        row.addEventListener('dragleave', () => row.classList.remove('is-over'));
        row.addEventListener('drop', (event) => {
          row.classList.remove('is-over');
          if (!event.dataTransfer || event.dataTransfer.files.length === 0 || sendButton.hidden) return;
          event.preventDefault();
          sendFilesToPeer(id, [...event.dataTransfer.files]);
        });
        if (hadRows || state.nearbyLoaded) animateIn(row);
        return row;
      },
      (row, e) => {
        const name = peerName(e.peer);
        setText(row.querySelector('[data-testid="nearby-peer-name"]'), name);
        setText(row.querySelector('.avatar'), name.slice(0, 1).toUpperCase());
        const jobs = state.jobPeers.get(e.peer.id);
        const info = Object.entries((jobs && jobs.discoveryInfo) || {})
          .map(([k, v]) => `${k}: ${v}`)
          .join(' · ');
        setText(
          row.querySelector('[data-testid="nearby-peer-node"]'),
          [nodeName(e.peer.nodeId), jobs ? 'receiving jobs' : '', info].filter(Boolean).join(' · '),
        );
        row.dataset.receivesJobs = jobs ? 'true' : 'false';
        // Job offers go only to people receiving jobs; everyone else can still get files, invitations and chats.
        row.querySelector('[data-testid="nearby-offer-job"]').hidden = !jobs;
        const send = row.querySelector('[data-testid="nearby-send-file"]');
        send.hidden = !hasPath('/api/v1/transfers');
        send.setAttribute('aria-label', `Send a file to ${name}`);
        row.querySelector('[data-testid="nearby-offer-job"]').setAttribute('aria-label', `Offer a job to ${name}`);
        row.classList.toggle('is-drop-target', !send.hidden);
        renderDirectSend(row);
      },
      animateOut,
    );
    el.nearbyEmpty.hidden = entries.length > 0;
    setText(
      el.nearbyEmpty,
      !signedIn()
        ? 'Sign in to see nearby peers.'
        : presenceMode()
          ? 'No one else has joined nearby yet. People appear here as soon as they join.'
          : 'No one nearby is receiving jobs right now. They appear here as they turn it on.',
    );
    // The send/invite pickers list the same peers.
    renderOfferTo();
    renderJobs();
    renderSessions();
  }

  /** The first 16 hex digits of a certificate fingerprint, in groups of four. */
  function shortFingerprint(fingerprint) {
    return String(fingerprint).slice(0, 16).replace(/(.{4})(?=.)/g, '$1:') + '…';
  }

  // Peers by service type: every other type this peer browses, each a live list.

  async function refreshServices() {
    const g = guard((fn) => fn());
    let types;
    try {
      types = ((await call('browsing')).browsing || []).filter((t) => t !== JOBS_SERVICE);
    } catch {
      return;
    }
    const lists = await Promise.allSettled(types.map((t) => call(`services/${encodeURIComponent(t)}/peers`)));
    g(() => {
      state.services = new Map(
        types.map((t, i) => [
          t,
          new Map((lists[i].status === 'fulfilled' ? lists[i].value.peers || [] : []).map((e) => [e.peer.id, e])),
        ]),
      );
      renderServices();
    });
  }

  /** The node's rule for service types (Bonjour / RFC 6335), checked here so no bad request goes out. */
  function serviceTypeProblem(type) {
    if (!type) return 'serviceType is required: enter a service type such as jobmanager-chat.';
    if (type.length > 15 || !/^[a-z0-9-]+$/.test(type) || !/[a-z]/.test(type) || /^-|-$|--/.test(type)) {
      return (
        `serviceType "${type}" is not valid: use 1–15 characters of a-z, 0-9 and '-', ` +
        'with at least one letter and no leading, trailing or double hyphen.'
      );
    }
    return null;
  }

  async function browseService(event) {
    event.preventDefault();
    const type = el.browseType.value.trim();
    showError(el.browseError, '');
    const problem = serviceTypeProblem(type);
    if (problem) {
      showError(el.browseError, problem);
      el.browseType.focus();
      return;
    }
    try {
      const result = await call(`browsing/${encodeURIComponent(type)}`, { method: 'PUT' });
      const key = result.serviceType || type;
      if (key !== JOBS_SERVICE) state.services.set(key, new Map((result.peers || []).map((e) => [e.peer.id, e])));
      el.browseType.value = '';
      renderServices();
    } catch (err) {
      showError(el.browseError, err.message);
      el.browseType.focus();
    }
  }

  async function stopBrowsing(type, group) {
    try {
      await call(`browsing/${encodeURIComponent(type)}`, { method: 'DELETE' });
    } catch (err) {
      if (err.status !== 404) {
        showError(group.querySelector('[data-testid="service-error"]'), `Could not stop: ${err.message}`);
        return;
      }
    }
    state.services.delete(type);
    renderServices();
  }

  function peerRow(testid) {
    return (e) => {
      const row = h(
        'li',
        { className: 'row nearby-row', dataset: { testid, peerId: e.peer.id } },
        h('span', { className: 'avatar', 'aria-hidden': 'true' }),
        h(
          'div',
          { className: 'row-main' },
          h('strong', { className: 'row-title', dataset: { testid: `${testid}-name` } }),
          h('span', { className: 'row-sub', dataset: { testid: `${testid}-node` } }),
        ),
      );
      animateIn(row);
      return row;
    };
  }

  function updatePeerRow(testid) {
    return (row, e) => {
      const name = peerName(e.peer);
      setText(row.querySelector(`[data-testid="${testid}-name"]`), name);
      setText(row.querySelector('.avatar'), name.slice(0, 1).toUpperCase());
      const info = Object.entries(e.discoveryInfo || {})
        .map(([k, v]) => `${k}: ${v}`)
        .join(' · ');
      setText(row.querySelector(`[data-testid="${testid}-node"]`), [nodeName(e.peer.nodeId), info].filter(Boolean).join(' · '));
    };
  }

  function renderServices() {
    const types = signedIn() ? [...state.services.keys()].sort() : [];
    syncList(
      el.servicesList,
      types,
      (t) => t,
      (t) => {
        const group = h(
          'section',
          { className: 'service-group', dataset: { testid: 'service-group', serviceType: t }, 'aria-label': `Peers advertising ${t}` },
          h(
            'div',
            { className: 'panel-head' },
            h('h3', { className: 'service-type mono', dataset: { testid: 'service-type' } }, t),
            h('button', { type: 'button', className: 'button button-small', dataset: { testid: 'service-stop' }, 'aria-label': `Stop browsing ${t}` }, 'Stop'),
          ),
          h('p', { className: 'field-error', role: 'alert', dataset: { testid: 'service-error' }, hidden: true }),
          h('p', { className: 'empty', dataset: { testid: 'service-empty' } }, 'No one advertises it right now.'),
          h('ul', { className: 'rows', dataset: { testid: 'service-peers' } }),
        );
        group.querySelector('[data-testid="service-stop"]').addEventListener('click', () => stopBrowsing(t, group));
        return group;
      },
      (group, t) => {
        const entries = [...(state.services.get(t) || new Map()).values()].sort((a, b) =>
          peerName(a.peer).localeCompare(peerName(b.peer)),
        );
        syncList(
          group.querySelector('[data-testid="service-peers"]'),
          entries,
          (e) => e.peer.id,
          peerRow('service-peer'),
          updatePeerRow('service-peer'),
          animateOut,
        );
        group.querySelector('[data-testid="service-empty"]').hidden = entries.length > 0;
      },
    );
    el.servicesEmpty.hidden = types.length > 0;
  }

  async function refreshMesh() {
    try {
      const result = await api('mesh/nodes');
      state.meshSelf = result.self || null;
      state.meshNodes = Array.isArray(result.nodes) ? result.nodes : [];
      state.meshAt = Date.now();
      noteMeshLosses();
      renderMesh();
      chat.meshChanged();
      // Peer rows name their node: keep those names in step with the mesh.
      renderNearby();
      renderServices();
    } catch {
      setText(el.meshUpdated, 'The node is not answering.');
    }
  }

  /** False for a node that was linked and is lost now (its peers are offline); true otherwise. */
  function nodeReachable(nodeId) {
    if (!nodeId || (state.meshSelf && state.meshSelf.id === nodeId)) return true;
    const seen = state.meshSeen.get(nodeId);
    return !(seen && seen.lostAt);
  }

  /** Keeps `meshSeen` in step with the latest list: linked nodes are (again) reachable, the others lost. */
  function noteMeshLosses() {
    const listed = new Map(state.meshNodes.filter((n) => n.id).map((n) => [n.id, n]));
    for (const [id, node] of listed) {
      if (node.state === 'linked') state.meshSeen.set(id, { node, lostAt: null });
      else if (state.meshSeen.has(id) && !state.meshSeen.get(id).lostAt) state.meshSeen.get(id).lostAt = state.meshAt;
    }
    for (const [id, seen] of state.meshSeen) {
      if (!listed.has(id) && !seen.lostAt) seen.lostAt = state.meshAt;
    }
  }

  /** The listed nodes plus those seen linked before that the node no longer lists. */
  function meshRows() {
    const rows = state.meshNodes.map((n) => {
      const seen = n.id && state.meshSeen.get(n.id);
      // A node that is not linked may be listed without its name: keep the one it had when linked.
      return seen && seen.lostAt ? { ...n, name: n.name || seen.node.name, lostAt: seen.lostAt } : n;
    });
    const listed = new Set(state.meshNodes.map((n) => n.id).filter(Boolean));
    for (const [id, seen] of state.meshSeen) {
      if (!listed.has(id) && seen.lostAt) rows.push({ ...seen.node, state: 'unreachable', rttMillis: null, lostAt: seen.lostAt });
    }
    return rows;
  }

  function renderMesh() {
    const self = state.meshSelf;
    setText(el.meshSelf, self ? `This node: ${self.name || shortId(self.id)} · port ${self.port ?? '—'}` : '…');
    // The certificate fingerprint is for people comparing it by hand: on hover, not in the line.
    el.meshSelf.title = self && self.fingerprint ? `Certificate fingerprint ${self.fingerprint}` : '';
    const nodes = meshRows().sort((a, b) => String(a.name || a.address).localeCompare(String(b.name || b.address)));
    syncList(
      el.meshList,
      nodes,
      (n) => n.id || n.address,
      () =>
        h(
          'li',
          { className: 'row mesh-row', dataset: { testid: 'mesh-node' } },
          h('span', { className: 'state-dot', 'aria-hidden': 'true' }),
          h(
            'div',
            { className: 'row-main' },
            h('strong', { className: 'row-title', dataset: { testid: 'mesh-node-name' } }),
            h('span', { className: 'row-sub', dataset: { testid: 'mesh-node-address' } }),
          ),
          h(
            'dl',
            { className: 'mini-facts' },
            h('div', {}, h('dt', {}, 'State'), h('dd', { dataset: { testid: 'mesh-node-state' } })),
          ),
          // Link internals, folded (task-first layout).
          h(
            'details',
            { className: 'details mesh-details', dataset: { testid: 'mesh-node-details' } },
            h('summary', {}, 'Details'),
            h(
              'dl',
              { className: 'mini-facts' },
              h('div', {}, h('dt', {}, 'Direction'), h('dd', { dataset: { testid: 'mesh-node-direction' } })),
              h('div', {}, h('dt', {}, 'RTT'), h('dd', { dataset: { testid: 'mesh-node-rtt' } })),
              h('div', {}, h('dt', {}, 'Link'), h('dd', { dataset: { testid: 'mesh-node-link' } })),
            ),
          ),
        ),
      (row, n) => {
        row.dataset.nodeId = n.id || '';
        row.dataset.state = n.lostAt ? 'unreachable' : n.state || 'unknown';
        setText(row.querySelector('[data-testid="mesh-node-name"]'), n.name || (n.id ? `node ${shortId(n.id)}` : n.address || 'unknown'));
        setText(
          row.querySelector('[data-testid="mesh-node-address"]'),
          [n.address, n.source ? `via ${n.source}` : ''].filter(Boolean).join(' · '),
        );
        const since = n.lostAt ? new Date(n.lostAt).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) : '';
        setText(row.querySelector('[data-testid="mesh-node-state"]'), n.lostAt ? `unreachable since ${since}` : n.state || '—');
        setText(row.querySelector('[data-testid="mesh-node-direction"]'), n.direction || '—');
        setText(row.querySelector('[data-testid="mesh-node-rtt"]'), Number.isFinite(n.rttMillis) ? `${n.rttMillis} ms` : '—');
        const link = n.encrypted === true ? 'TLS' : n.encrypted === false ? 'plaintext' : '—';
        const print = n.fingerprint ? ` · ${shortFingerprint(n.fingerprint)}${n.pinned ? ' (pinned)' : ''}` : '';
        setText(row.querySelector('[data-testid="mesh-node-link"]'), link + print);
        if (n.fingerprint) row.querySelector('[data-testid="mesh-node-link"]').title = n.fingerprint;
      },
    );
    el.meshEmpty.hidden = nodes.length > 0;
    if (state.meshAt) setText(el.meshUpdated, `Updated ${new Date(state.meshAt).toLocaleTimeString()}`);
  }

  // --------------------------------------------------------------- jobs

  function jobFieldEl(field) {
    return byTestId(JOB_FIELDS[field]);
  }

  function clearJobErrors() {
    for (const field of Object.keys(JOB_FIELDS)) {
      showError(byTestId(`${JOB_FIELDS[field]}-error`), '');
      jobFieldEl(field).removeAttribute('aria-invalid');
    }
    showError(el.jobFormError, '');
  }

  /** Server messages name the field first ("dueDate must be …"): show them under it. */
  function showJobError(message) {
    const match = /^(name|dueDate|payment|notes)\b/.exec(message || '');
    if (match) {
      showError(byTestId(`${JOB_FIELDS[match[1]]}-error`), message);
      const input = jobFieldEl(match[1]);
      input.setAttribute('aria-invalid', 'true');
      input.focus();
    } else {
      showError(el.jobFormError, message);
    }
  }

  /** Empty the job form; `forget` also drops its saved draft (after a save or a cancel). */
  function resetJobForm({ forget = true } = {}) {
    state.editingJobId = null;
    el.jobForm.reset();
    if (forget) {
      for (const field of Object.keys(JOB_FIELDS)) setDraft(`job.${field}`, '');
      setDraft('job.editing', '');
    }
    clearJobErrors();
    setText(el.jobFormTitle, 'New job');
    setText(el.jobSubmit, 'Add job');
    el.jobCancelEdit.hidden = true;
    updateJobNameCount();
    renderOfferTo();
  }

  function editJob(job) {
    state.editingJobId = job.id;
    clearJobErrors();
    jobFieldEl('name').value = job.name || '';
    jobFieldEl('dueDate').value = job.dueDate || '';
    jobFieldEl('payment').value = job.payment || '';
    jobFieldEl('notes').value = job.notes || '';
    saveJobDraft();
    updateJobNameCount();
    setText(el.jobFormTitle, `Edit “${job.name}”`);
    setText(el.jobSubmit, 'Save changes');
    el.jobCancelEdit.hidden = false;
    renderOfferTo();
    jobFieldEl('name').focus();
  }

  /** The live "n / 200" under the job name; marked when over the limit. */
  function updateJobNameCount() {
    const count = characterCount(jobFieldEl('name').value);
    const counter = byTestId('job-name-count');
    setText(counter, `${count} / ${MAX_JOB_NAME_CHARACTERS}`);
    counter.classList.toggle('is-over', count > MAX_JOB_NAME_CHARACTERS);
    // Over the limit it is said at once; an error already shown follows what is typed (never a stale one).
    const error = byTestId('job-name-error');
    if (!error || (error.hidden && count <= MAX_JOB_NAME_CHARACTERS)) return;
    const value = jobFieldEl('name').value;
    const problem = !value.trim()
      ? 'Give the job a name.'
      : count > MAX_JOB_NAME_CHARACTERS
        ? `Shorten the name to ${MAX_JOB_NAME_CHARACTERS} characters or fewer (it has ${count}).`
        : '';
    showError(error, problem);
    if (problem) jobFieldEl('name').setAttribute('aria-invalid', 'true');
    else jobFieldEl('name').removeAttribute('aria-invalid');
  }

  /** A problem with one job field, said for people, shown under that field. */
  function showJobFieldError(field, message) {
    showError(byTestId(`${JOB_FIELDS[field]}-error`), message);
    const input = jobFieldEl(field);
    input.setAttribute('aria-invalid', 'true');
    input.focus();
  }

  function saveJobDraft() {
    for (const field of Object.keys(JOB_FIELDS)) setDraft(`job.${field}`, jobFieldEl(field).value);
    setDraft('job.editing', state.editingJobId || '');
  }

  /** Put back what was typed into the job form before a reload (or sign-in as the same peer). */
  function restoreJobDraft() {
    for (const field of Object.keys(JOB_FIELDS)) jobFieldEl(field).value = getDraft(`job.${field}`);
    updateJobNameCount();
    const editing = getDraft('job.editing');
    if (editing) {
      state.editingJobId = editing;
      setText(el.jobFormTitle, 'Edit job');
      setText(el.jobSubmit, 'Save changes');
      el.jobCancelEdit.hidden = false;
    }
  }

  async function onJobSubmit(event) {
    event.preventDefault();
    clearJobErrors();
    const editing = state.editingJobId;
    const values = {};
    for (const field of Object.keys(JOB_FIELDS)) values[field] = jobFieldEl(field).value;
    if (!values.name.trim()) {
      showJobFieldError('name', 'Give the job a name.');
      return;
    }
    const nameLength = characterCount(values.name);
    if (nameLength > MAX_JOB_NAME_CHARACTERS) {
      showJobFieldError(
        'name',
        `Shorten the name to ${MAX_JOB_NAME_CHARACTERS} characters or fewer (it has ${nameLength}).`,
      );
      return;
    }
    const body = { name: values.name };
    for (const field of ['dueDate', 'payment', 'notes']) {
      const value = field === 'notes' ? values[field] : values[field].trim();
      if (value !== '') body[field] = value;
      else if (editing) body[field] = null; // clearing a field on edit
    }
    el.jobSubmit.disabled = true;
    try {
      const result = editing
        ? await call(`jobs/${encodeURIComponent(editing)}`, { method: 'PATCH', body })
        : await call('jobs', { method: 'POST', body });
      if (result && result.job) upsertJob(result.job);
      const offerTo = !editing && state.offerTo && state.jobPeers.has(state.offerTo.id) ? state.offerTo : null;
      state.offerTo = null;
      resetJobForm();
      if (!editing) jobFieldEl('name').focus();
      if (offerTo && result && result.job) {
        const problem = await offerJob(result.job, offerTo.id);
        if (problem) state.jobOffers.set(result.job.id, { failure: `Not offered to ${peerName(offerTo)}: ${problem}` });
        renderJobs();
      }
    } catch (err) {
      showJobError(err.status === 0 ? `${err.message} Your input is kept; try again.` : err.message);
    } finally {
      el.jobSubmit.disabled = false;
    }
  }

  function upsertJob(job) {
    if (!job || !job.id) return;
    state.jobs.set(job.id, job);
    if (job.assignedTo) state.jobOffers.delete(job.id);
    renderJobs();
  }

  async function deleteJob(job, row) {
    try {
      await call(`jobs/${encodeURIComponent(job.id)}`, { method: 'DELETE' });
    } catch (err) {
      if (err.status !== 404) {
        showError(row.querySelector('[data-testid="job-error"]'), `Could not delete: ${err.message}`);
        return;
      }
    }
    state.jobs.delete(job.id);
    state.jobOffers.delete(job.id);
    if (state.editingJobId === job.id) resetJobForm();
    renderJobs();
  }

  async function sendJob(job, row) {
    const select = row.querySelector('[data-testid="job-send-to"]');
    const to = select.value;
    const error = row.querySelector('[data-testid="job-error"]');
    showError(error, '');
    if (!to) {
      showError(error, 'Pick a nearby peer who is receiving jobs.');
      return;
    }
    const button = row.querySelector('[data-testid="job-send"]');
    button.disabled = true;
    showError(error, await offerJob(job, to));
    renderJobs();
  }

  /** Offers a job to a peer (POST /jobs/{id}/send); '' or what went wrong. */
  async function offerJob(job, to) {
    try {
      const result = await call(`jobs/${encodeURIComponent(job.id)}/send`, { method: 'POST', body: { to } });
      const invitation = result && result.invitation;
      if (invitation) {
        state.invitations.set(invitation.id, invitation);
        state.jobOffers.set(job.id, { invitationId: invitation.id });
        renderInvitations();
      }
      return '';
    } catch (err) {
      return err.message;
    }
  }

  /** "Offer job" on a nearby peer: the job form, which offers the job it adds to that peer. */
  function startJobOffer(peer) {
    state.offerTo = peer;
    if (state.editingJobId) resetJobForm({ forget: false });
    renderOfferTo();
    selectView('jobs');
    jobFieldEl('name').focus();
  }

  function renderOfferTo() {
    const line = byTestId('job-offer-to');
    const peer = state.offerTo && state.jobPeers.get(state.offerTo.id) ? state.offerTo : null;
    line.hidden = !peer || Boolean(state.editingJobId);
    setText(byTestId('job-offer-to-text'), peer ? `Offered to ${peerName(peer)} as soon as you add it.` : '');
    if (!state.editingJobId) setText(el.jobSubmit, peer ? `Add and offer to ${peerName(peer)}` : 'Add job');
  }

  function jobStatus(job) {
    if (job.assignedTo) return { text: `Assigned to ${peerName(job.assignedTo)}`, kind: 'ok' };
    const offer = state.jobOffers.get(job.id);
    if (offer && offer.invitationId) {
      const invitation = state.invitations.get(offer.invitationId);
      if (invitation && invitation.state === 'pending') {
        return {
          text: `Offered to ${peerName(invitation.to)} · code ${invitation.verificationCode} · waiting for an answer`,
          kind: 'pending',
        };
      }
    }
    if (offer && offer.failure) return { text: offer.failure, kind: 'bad' };
    if (job.receivedFrom) return { text: `Received from ${peerName(job.receivedFrom)}`, kind: 'info' };
    return { text: 'Not sent yet', kind: 'muted' };
  }

  function renderJobs() {
    const jobs = signedIn()
      ? [...state.jobs.values()].sort((a, b) => String(b.createdAt).localeCompare(String(a.createdAt)))
      : [];
    syncList(
      el.jobsList,
      jobs,
      (job) => job.id,
      (job) => {
        const row = h(
          'li',
          { className: 'row job-row', dataset: { testid: 'job-row', jobId: job.id } },
          h(
            'div',
            { className: 'row-main' },
            h('strong', { className: 'row-title', dataset: { testid: 'job-name' } }),
            h('span', { className: 'row-sub', dataset: { testid: 'job-meta' } }),
            h('p', { className: 'job-notes', dataset: { testid: 'job-notes' } }),
            h('p', { className: 'status-line', dataset: { testid: 'job-status' } }),
            h('p', { className: 'hint', dataset: { testid: 'job-assigned-to' } }),
            h('p', { className: 'hint', dataset: { testid: 'job-received-from' } }),
          ),
          h(
            'div',
            { className: 'row-actions' },
            h(
              'div',
              { className: 'send-group' },
              h('label', { className: 'visually-hidden', for: `send-to-${job.id}` }, `Send “${job.name}” to`),
              h('select', { className: 'input input-small', id: `send-to-${job.id}`, dataset: { testid: 'job-send-to' } }),
              h('button', { type: 'button', className: 'button button-small button-primary', dataset: { testid: 'job-send' } }, 'Send'),
            ),
            h(
              'div',
              { className: 'button-row' },
              h('button', { type: 'button', className: 'button button-small', dataset: { testid: 'job-edit' } }, 'Edit'),
              h('button', { type: 'button', className: 'button button-small button-danger', dataset: { testid: 'job-delete' } }, 'Delete'),
            ),
          ),
          h('p', { className: 'field-error row-error', role: 'alert', dataset: { testid: 'job-error' }, hidden: true }),
        );
        const id = job.id;
        row.querySelector('[data-testid="job-edit"]').addEventListener('click', () => {
          const current = state.jobs.get(id);
          if (current) editJob(current);
        });
        row.querySelector('[data-testid="job-send"]').addEventListener('click', () => {
          const current = state.jobs.get(id);
          if (current) sendJob(current, row);
        });
        confirmButton(row.querySelector('[data-testid="job-delete"]'), 'Delete', 'Confirm delete', () => {
          const current = state.jobs.get(id);
          if (current) deleteJob(current, row);
        });
        return row;
      },
      (row, job) => {
        setText(row.querySelector('[data-testid="job-name"]'), job.name);
        const meta = [job.dueDate ? `Due ${formatDay(job.dueDate)}` : 'No due date', job.payment ? `Pays ${job.payment}` : 'No payment set'];
        setText(row.querySelector('[data-testid="job-meta"]'), meta.join(' · '));
        const notes = row.querySelector('[data-testid="job-notes"]');
        setText(notes, job.notes || '');
        notes.hidden = !job.notes;
        const status = jobStatus(job);
        const statusEl = row.querySelector('[data-testid="job-status"]');
        setText(statusEl, status.text);
        statusEl.dataset.kind = status.kind;
        const assigned = row.querySelector('[data-testid="job-assigned-to"]');
        setText(assigned, job.assignedTo ? `Delivered to ${peerName(job.assignedTo)} on ${nodeName(job.assignedTo.nodeId)}` : '');
        assigned.hidden = !job.assignedTo;
        const received = row.querySelector('[data-testid="job-received-from"]');
        setText(received, job.receivedFrom ? `From ${peerName(job.receivedFrom)} on ${nodeName(job.receivedFrom.nodeId)}` : '');
        received.hidden = !job.receivedFrom;
        row.dataset.assigned = job.assignedTo ? 'true' : 'false';
        const select = row.querySelector('[data-testid="job-send-to"]');
        const count = fillPeerSelect(select, { jobsOnly: true });
        const pending = status.kind === 'pending';
        const sendGroup = row.querySelector('.send-group');
        // A job that was assigned, or that came from someone else, is not offered on again from here.
        sendGroup.hidden = Boolean(job.assignedTo || job.receivedFrom);
        row.querySelector('[data-testid="job-send"]').disabled = count === 0 || pending;
      },
    );
    el.jobsEmpty.hidden = jobs.length > 0;
    setText(el.jobsCount, jobs.length === 1 ? '1 job' : `${jobs.length} jobs`);
  }

  // -------------------------------------------------------- invitations

  function upsertInvitation(invitation) {
    if (!invitation || !invitation.id) return;
    state.invitations.set(invitation.id, invitation);
    if (invitation.state !== 'pending') state.promptProblems.delete(invitation.id);
    renderInvitations();
    renderJobs();
    advanceDirectSends();
  }

  async function answerInvitation(invitation, accept) {
    try {
      const result = await call(`invitations/${encodeURIComponent(invitation.id)}/${accept ? 'accept' : 'decline'}`, {
        method: 'POST',
      });
      if (result && result.invitation) upsertInvitation(result.invitation);
      if (accept) refreshSessionsSoon();
    } catch (err) {
      let message = err.message;
      if (err.status === 409) {
        message = /expired/.test(err.message)
          ? `This offer expired before you answered. Ask ${peerName(invitation.from)} to send it again.`
          : `Too late: ${err.message}.`;
        // The node will also tell us the final state; show it as closed now.
        state.invitations.set(invitation.id, { ...invitation, state: /expired/.test(err.message) ? 'expired' : invitation.state });
      }
      state.promptProblems.set(invitation.id, message);
      renderInvitations();
    }
  }

  async function cancelInvitation(invitation, row) {
    try {
      const result = await call(`invitations/${encodeURIComponent(invitation.id)}/cancel`, { method: 'POST' });
      if (result && result.invitation) upsertInvitation(result.invitation);
    } catch (err) {
      showError(row.querySelector('[data-testid="invitation-error"]'), err.message);
    }
  }

  function expiresText(invitation) {
    if (invitation.state !== 'pending' || !invitation.expiresAt) return '';
    const seconds = Math.ceil((new Date(invitation.expiresAt).getTime() - Date.now()) / 1000);
    if (!Number.isFinite(seconds)) return '';
    return seconds > 0 ? `expires in ${seconds} s` : 'expiring…';
  }

  /**
   * A job offer's invitation (POST /jobs/{id}/send: a pointToPoint session) carries the whole job as its
   * context: the name, then "Due: …", "Payment: …" and "Notes: …" lines (notes last, maybe on several lines).
   * Null for any other invitation.
   */
  function jobOffer(invitation) {
    if (!invitation || !invitation.context || !invitation.session || invitation.session.strategy !== 'pointToPoint') return null;
    const [name, ...rest] = String(invitation.context).split('\n');
    const offer = { name, dueDate: '', payment: '', notes: '' };
    for (let i = 0; i < rest.length; i += 1) {
      const line = rest[i];
      if (line.startsWith('Due: ')) offer.dueDate = line.slice(5);
      else if (line.startsWith('Payment: ')) offer.payment = line.slice(9);
      else if (line.startsWith('Notes: ')) {
        offer.notes = [line.slice(7), ...rest.slice(i + 1)].join('\n');
        break;
      }
    }
    return offer;
  }

  /** The job offer's fields in a sentence: "due 2027-03-31, pays 120.00". */
  /** A YYYY-MM-DD day in the person's locale ("Mar 31, 2027"); anything else as it came. */
  function formatDay(day) {
    const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(String(day));
    if (!match) return String(day);
    const date = new Date(Number(match[1]), Number(match[2]) - 1, Number(match[3]));
    return Number.isNaN(date.getTime()) ? String(day) : date.toLocaleDateString(undefined, { dateStyle: 'medium' });
  }

  function jobTerms(offer) {
    return [offer.dueDate ? `due ${formatDay(offer.dueDate)}` : '', offer.payment ? `pays ${offer.payment}` : ''].filter(Boolean).join(', ');
  }

  /** What an invitation offers, said once in the arrivals region. */
  function offerText(invitation) {
    const from = peerName(invitation.from);
    const job = jobOffer(invitation);
    if (job) {
      const terms = jobTerms(job);
      return `${from} offers you the job “${job.name}”${terms ? ` (${terms})` : ''}`;
    }
    const context = invitation.context ? String(invitation.context) : '';
    if (context.startsWith(`${from} `)) return context;
    return context ? `${from} invites you to a session: “${context}”` : `${from} invites you to a session`;
  }

  /** What an invitation this peer sent offers, from its side: "Job “Fix the roof” offered to Bob". */
  function sentOfferText(invitation) {
    const to = peerName(invitation.to);
    const job = jobOffer(invitation);
    if (job) return `Job “${job.name}” offered to ${to}`;
    const file = fileOffer(invitation);
    if (file) return `${file} offered to ${to}`;
    const context = invitation.context ? String(invitation.context) : '';
    return context ? `${to} invited to a session: “${context}”` : `${to} invited to a session`;
  }

  /** [lead words, the offer] shown after the sender's name on a prompt. */
  function promptWords(invitation) {
    const from = peerName(invitation.from);
    const job = jobOffer(invitation);
    if (job) return [' offers you the job ', job.name];
    const context = invitation.context ? String(invitation.context) : '';
    // "Ann wants to send you slides.pdf (30 MB)": the context already says who and what.
    if (context.startsWith(`${from} `)) return [' ', context.slice(from.length + 1)];
    return context ? [' invites you to a session: ', context] : [' invites you to a session', ''];
  }

  /** What a one-step send's invitation says is coming ("slides.pdf (30 MB)", "3 files (30 MB)"), or null. */
  function fileOffer(invitation) {
    if (!invitation || !invitation.session || !invitation.session.id || !invitation.from) return null;
    const lead = `${peerName(invitation.from)} wants to send you `;
    const context = invitation.context ? String(invitation.context) : '';
    return context.startsWith(lead) ? context.slice(lead.length) : null;
  }

  /** The received job that an accepted offer became (the newest from that sender with that name). */
  function jobFromOffer(invitation) {
    const offer = jobOffer(invitation);
    if (!offer) return null;
    let found = null;
    for (const job of state.jobs.values()) {
      if (job.receivedFrom && job.receivedFrom.id === invitation.from.id && job.name === offer.name) {
        if (!found || String(job.createdAt) > String(found.createdAt)) found = job;
      }
    }
    return found;
  }

  /** Opens the Jobs view at a job's row and moves the focus there. */
  function showJob(job) {
    selectView('jobs');
    const row = el.jobsList.querySelector(`[data-job-id="${CSS.escape(job.id)}"]`);
    if (!row) return;
    row.tabIndex = -1;
    row.classList.add('is-highlighted');
    row.scrollIntoView({ block: 'nearest', behavior: reducedMotion.matches ? 'auto' : 'smooth' });
    row.focus({ preventScroll: true });
    window.setTimeout(() => row.classList.remove('is-highlighted'), 2_000);
  }

  function renderPrompts() {
    const prompts = signedIn()
      ? [...state.invitations.values()].filter(
          (inv) =>
            isIncoming(inv) &&
            (inv.state === 'pending' || state.promptProblems.has(inv.id) || (inv.state === 'accepted' && state.acceptedOffers.has(inv.id))),
        )
      : [];
    syncList(
      el.promptList,
      prompts,
      (inv) => inv.id,
      (inv) => {
        const row = h(
          'li',
          {
            className: 'prompt',
            dataset: { testid: 'invitation-prompt', invitationId: inv.id },
          },
          h(
            'p',
            { className: 'prompt-title', id: `prompt-title-${inv.id}` },
            h('strong', { dataset: { testid: 'prompt-from' } }),
            h('span', { dataset: { testid: 'prompt-lead' } }),
            h('strong', { dataset: { testid: 'prompt-context' } }),
          ),
          h(
            'dl',
            { className: 'prompt-job', dataset: { testid: 'prompt-job' }, hidden: true },
            h('div', { className: 'fact' }, h('dt', {}, 'Due'), h('dd', { dataset: { testid: 'prompt-job-due' } })),
            h('div', { className: 'fact' }, h('dt', {}, 'Payment'), h('dd', { dataset: { testid: 'prompt-job-payment' } })),
            h('div', { className: 'fact fact-wide' }, h('dt', {}, 'Notes'), h('dd', { className: 'job-notes', dataset: { testid: 'prompt-job-notes' } })),
          ),
          h(
            'p',
            { className: 'prompt-added', role: 'status', dataset: { testid: 'prompt-added' }, hidden: true },
            h('span', { dataset: { testid: 'prompt-added-text' } }),
            ' ',
            h('button', { type: 'button', className: 'button button-small button-primary', dataset: { testid: 'prompt-show-job' }, hidden: true }, 'Show in Jobs'),
          ),
          h(
            'p',
            { className: 'prompt-code-line' },
            'Verification code ',
            h('code', { className: 'code', dataset: { testid: 'prompt-code' } }),
            h('span', { className: 'hint prompt-expires', dataset: { testid: 'prompt-expires' } }),
          ),
          h('p', { className: 'hint prompt-check' }, 'Check that the same code shows on their screen before you accept.'),
          h('p', { className: 'field-error', role: 'alert', dataset: { testid: 'prompt-error' }, hidden: true }),
          h(
            'div',
            { className: 'button-row' },
            h('button', { type: 'button', className: 'button button-primary', dataset: { testid: 'prompt-accept' } }, 'Accept'),
            h('button', { type: 'button', className: 'button', dataset: { testid: 'prompt-decline' } }, 'Decline'),
            h('button', { type: 'button', className: 'button', dataset: { testid: 'prompt-dismiss' }, hidden: true }, 'Dismiss'),
          ),
        );
        const id = inv.id;
        const answer = (accept) => {
          const current = state.invitations.get(id);
          if (!current) return;
          // The pressed button is disabled (a disabled button loses the focus to <body>): the prompt holds it
          // until the answer is shown.
          row.tabIndex = -1;
          row.focus({ preventScroll: true });
          row.querySelector('[data-testid="prompt-accept"]').disabled = true;
          row.querySelector('[data-testid="prompt-decline"]').disabled = true;
          if (accept && jobOffer(current)) state.acceptedOffers.add(id);
          const promised = accept && fileOffer(current);
          if (promised) files.expect(current.session.id, current.from.id, promised);
          answerInvitation(current, accept);
        };
        row.querySelector('[data-testid="prompt-show-job"]').addEventListener('click', () => {
          const current = state.invitations.get(id);
          const job = current && jobFromOffer(current);
          state.acceptedOffers.delete(id);
          renderInvitations();
          if (job) showJob(job);
        });
        row.querySelector('[data-testid="prompt-accept"]').addEventListener('click', () => answer(true));
        row.querySelector('[data-testid="prompt-decline"]').addEventListener('click', () => answer(false));
        row.querySelector('[data-testid="prompt-dismiss"]').addEventListener('click', () => {
          state.promptProblems.delete(id);
          state.acceptedOffers.delete(id);
          renderInvitations();
        });
        animateIn(row);
        return row;
      },
      (row, inv) => {
        row.dataset.state = inv.state;
        setText(row.querySelector('[data-testid="prompt-from"]'), peerName(inv.from));
        const [lead, what] = promptWords(inv);
        setText(row.querySelector('[data-testid="prompt-lead"]'), lead);
        setText(row.querySelector('[data-testid="prompt-context"]'), what);
        const job = jobOffer(inv);
        row.querySelector('[data-testid="prompt-job"]').hidden = !job;
        if (job) {
          setText(row.querySelector('[data-testid="prompt-job-due"]'), job.dueDate ? formatDay(job.dueDate) : 'No due date');
          row.querySelector('[data-testid="prompt-job-due"]').title = job.dueDate || '';
          setText(row.querySelector('[data-testid="prompt-job-payment"]'), job.payment || 'Not set');
          setText(row.querySelector('[data-testid="prompt-job-notes"]'), job.notes || 'None');
        }
        const accepted = inv.state === 'accepted' && state.acceptedOffers.has(inv.id);
        const received = accepted ? jobFromOffer(inv) : null;
        row.querySelector('[data-testid="prompt-added"]').hidden = !accepted;
        setText(row.querySelector('[data-testid="prompt-added-text"]'), received ? 'Added to your Jobs.' : 'Accepted: the job is on its way…');
        row.querySelector('[data-testid="prompt-show-job"]').hidden = !received;
        row.querySelector('.prompt-code-line').hidden = accepted;
        row.querySelector('.prompt-check').hidden = accepted;
        setText(row.querySelector('[data-testid="prompt-code"]'), inv.verificationCode || '—');
        setText(row.querySelector('[data-testid="prompt-expires"]'), expiresText(inv));
        const problem = state.promptProblems.get(inv.id);
        showError(row.querySelector('[data-testid="prompt-error"]'), problem || '');
        const open = inv.state === 'pending' && !problem;
        row.querySelector('[data-testid="prompt-accept"]').hidden = !open;
        row.querySelector('[data-testid="prompt-decline"]').hidden = !open;
        const hadFocus = row.contains(document.activeElement);
        row.querySelector('[data-testid="prompt-dismiss"]').hidden = open;
        if (hadFocus && !open && (document.activeElement === row || document.activeElement.hidden || !row.contains(document.activeElement) || document.activeElement.getClientRects().length === 0)) {
          // Answered: the buttons pressed are gone; the focus goes to what happened ("Added to your Jobs") and its Dismiss.
          const shown = row.querySelector('[data-testid="prompt-show-job"]');
          (shown && !shown.hidden ? shown : row.querySelector('[data-testid="prompt-dismiss"]')).focus();
        }
        if (open) {
          row.querySelector('[data-testid="prompt-accept"]').disabled = false;
          row.querySelector('[data-testid="prompt-decline"]').disabled = false;
        }
      },
    );
    el.prompts.hidden = prompts.length === 0;
    const pending = prompts.filter((inv) => inv.state === 'pending').length;
    el.invitationsBadge.hidden = pending === 0;
    setText(el.invitationsBadge, String(pending));
    el.invitationsBadge.setAttribute('aria-label', `${pending} waiting`);
    countArrivals('offers', pending);
  }

  function invitationRow(inv, incoming) {
    const row = h(
      'li',
      {
        className: 'row invitation-row',
        dataset: { testid: 'invitation-row', invitationId: inv.id, direction: incoming ? 'incoming' : 'outgoing' },
      },
      h(
        'div',
        { className: 'row-main' },
        h('strong', { className: 'row-title', dataset: { testid: 'invitation-title' } }),
        h('span', { className: 'row-sub', dataset: { testid: 'invitation-meta' } }),
      ),
      h('span', { className: 'pill', dataset: { testid: 'invitation-state' } }),
      h(
        'div',
        { className: 'button-row row-actions' },
        incoming
          ? h('button', { type: 'button', className: 'button button-small button-primary', dataset: { testid: 'invitation-accept' } }, 'Accept')
          : null,
        incoming
          ? h('button', { type: 'button', className: 'button button-small', dataset: { testid: 'invitation-decline' } }, 'Decline')
          : h('button', { type: 'button', className: 'button button-small button-danger', dataset: { testid: 'invitation-cancel' } }, 'Cancel'),
      ),
      h('p', { className: 'field-error row-error', role: 'alert', dataset: { testid: 'invitation-error' }, hidden: true }),
    );
    const id = inv.id;
    const current = () => state.invitations.get(id);
    if (incoming) {
      row.querySelector('[data-testid="invitation-accept"]').addEventListener('click', () => current() && answerInvitation(current(), true));
      row.querySelector('[data-testid="invitation-decline"]').addEventListener('click', () => current() && answerInvitation(current(), false));
    } else {
      row.querySelector('[data-testid="invitation-cancel"]').addEventListener('click', () => current() && cancelInvitation(current(), row));
    }
    return row;
  }

  function updateInvitationRow(row, inv, incoming) {
    row.dataset.state = inv.state;
    setText(
      row.querySelector('[data-testid="invitation-title"]'),
      incoming ? offerText(inv) : sentOfferText(inv),
    );
    setText(
      row.querySelector('[data-testid="invitation-meta"]'),
      [`code ${inv.verificationCode || '—'}`, `session ${shortId(inv.session && inv.session.id)}`, expiresText(inv)]
        .filter(Boolean)
        .join(' · '),
    );
    const pill = row.querySelector('[data-testid="invitation-state"]');
    setText(pill, inv.state);
    pill.dataset.state = inv.state;
    const pending = inv.state === 'pending';
    for (const button of row.querySelectorAll('.row-actions button')) button.hidden = !pending;
    if (incoming) showError(row.querySelector('[data-testid="invitation-error"]'), state.promptProblems.get(inv.id) || '');
  }

  function renderInvitations() {
    const all = signedIn() ? [...state.invitations.values()] : [];
    const byNewest = (a, b) => String(b.expiresAt).localeCompare(String(a.expiresAt));
    const incoming = all.filter(isIncoming).sort(byNewest);
    const outgoing = all.filter((inv) => !isIncoming(inv)).sort(byNewest);
    syncList(el.incomingList, incoming, (i) => i.id, (i) => invitationRow(i, true), (r, i) => updateInvitationRow(r, i, true));
    syncList(el.outgoingList, outgoing, (i) => i.id, (i) => invitationRow(i, false), (r, i) => updateInvitationRow(r, i, false));
    el.incomingEmpty.hidden = incoming.length > 0;
    el.outgoingEmpty.hidden = outgoing.length > 0;
    renderPrompts();
  }

  // ----------------------------------------------------------- sessions

  let sessionsTimer = 0;
  function refreshSessionsSoon() {
    window.clearTimeout(sessionsTimer);
    sessionsTimer = window.setTimeout(guard(refreshSessions), SESSION_REFRESH_DEBOUNCE_MS);
  }

  /** A session's facts in words: "2 of 3 connected · encrypted · up to 64 people". */
  function sessionFacts(s) {
    const members = s.members || [];
    const connected = members.filter((m) => m.state === 'connected').length;
    const encryption = { required: 'encrypted', optional: 'encrypted where the link allows', none: 'not encrypted' }[s.encryption];
    const shape = { star: 'everyone through the host', pointToPoint: 'two people only' }[s.strategy];
    return [
      `${connected} of ${members.length} connected`,
      encryption,
      shape,
      s.strategy === 'pointToPoint' || !s.maxPeers ? '' : `up to ${s.maxPeers} people`,
    ]
      .filter(Boolean)
      .join(' · ');
  }

  async function refreshSessions() {
    if (!signedIn()) return;
    const done = guard((result) => {
      const fresh = new Map((result.sessions || []).map((s) => [s.id, s]));
      // A session hosted on another node that the node no longer lists, which we did not leave, ended with its
      // host's node: it stays shown as ended (its people offline) until that node is back, instead of vanishing.
      for (const [id, old] of state.sessions) {
        if (fresh.has(id) || !old.hostNodeId || (state.me && old.hostNodeId === state.me.nodeId)) continue;
        const mine = (old.members || []).find((m) => state.me && m.id === state.me.id);
        if (!mine || (mine.state === 'notConnected' && !old.ended)) continue;
        fresh.set(id, { ...old, ended: true, members: (old.members || []).map((m) => (m === mine ? m : { ...m, state: 'notConnected' })) });
      }
      state.sessions = fresh;
      renderSessions();
    });
    try {
      done(await call('sessions'));
    } catch {
      // The socket's reconnect reloads everything; nothing to show here.
    }
  }

  async function createSession() {
    showError(el.sessionsError, '');
    el.sessionCreate.disabled = true;
    try {
      const result = await call('sessions', { method: 'POST', body: { strategy: 'cluster' } });
      if (result && result.session) state.sessions.set(result.session.id, result.session);
      renderSessions();
      const row = el.sessionsList.querySelector(`[data-session-id="${CSS.escape(result.session.id)}"] select`);
      if (row) row.focus();
    } catch (err) {
      showError(el.sessionsError, `Could not start a session: ${err.message}`);
    } finally {
      el.sessionCreate.disabled = false;
    }
  }

  async function leaveSession(session) {
    try {
      await call(`sessions/${encodeURIComponent(session.id)}/members/me`, { method: 'DELETE' });
    } catch (err) {
      if (err.status !== 404) {
        showError(el.sessionsError, `Could not leave: ${err.message}`);
        return;
      }
    }
    state.sessions.delete(session.id);
    state.messages.delete(session.id);
    setDraft(`session.${session.id}`, '');
    renderSessions();
  }

  async function invitePeer(session, row) {
    const select = row.querySelector('[data-testid="session-invite-peer"]');
    const error = row.querySelector('[data-testid="session-error"]');
    showError(error, '');
    if (!select.value) {
      showError(error, 'Pick a nearby peer to invite.');
      return;
    }
    try {
      const result = await call('invitations', {
        method: 'POST',
        body: { to: select.value, session: session.id, context: `Join my session`, timeoutSeconds: 60 },
      });
      if (result && result.invitation) upsertInvitation(result.invitation);
      const inv = result.invitation;
      showError(error, '');
      setText(row.querySelector('[data-testid="session-note"]'), `Invited ${peerName(inv.to)} · code ${inv.verificationCode}`);
    } catch (err) {
      showError(error, err.message);
    }
  }

  let messageSeq = 0;
  /** Keep a message (with a stable key for the keyed list). */
  function addMessage(sessionId, message) {
    let list = state.messages.get(sessionId);
    if (!list) state.messages.set(sessionId, (list = []));
    messageSeq += 1;
    list.push({ ...message, key: `m${messageSeq}` });
    if (list.length > MAX_MESSAGES_PER_SESSION) list.shift();
  }

  async function sendText(session, row) {
    const input = row.querySelector('[data-testid="session-text"]');
    const error = row.querySelector('[data-testid="session-error"]');
    const text = input.value;
    if (!text) return;
    const button = row.querySelector('[data-testid="session-send"]');
    button.disabled = true;
    showError(error, '');
    try {
      // Raw body; fetch sends a string as text/plain.
      const response = await fetch(
        new URL(`api/v1/sessions/${encodeURIComponent(session.id)}/data?mode=reliable`, document.baseURI),
        {
          method: 'POST',
          headers: { Authorization: `Bearer ${state.token}`, 'Content-Type': 'text/plain; charset=utf-8' },
          body: text,
          cache: 'no-store',
        },
      );
      if (!response.ok) {
        let message = `The node answered ${response.status}`;
        try {
          const payload = await response.json();
          if (payload && payload.error && payload.error.message) message = payload.error.message;
        } catch {
          // keep the status line
        }
        throw new ApiError(response.status, 'send_failed', message);
      }
      addMessage(session.id, { from: state.me, text, at: new Date(), mine: true });
      input.value = ''; // cleared only once the node took it
      setDraft(`session.${session.id}`, '');
      renderSessions();
    } catch (err) {
      showError(error, `Not sent (your text is kept): ${err.message}`);
    } finally {
      button.disabled = false;
      input.focus();
    }
  }

  function renderSessions() {
    const sessions = signedIn() ? [...state.sessions.values()] : [];
    syncList(
      el.sessionsList,
      sessions,
      (s) => s.id,
      (s) => {
        const formId = `session-form-${s.id}`;
        const row = h(
          'li',
          { className: 'row session-row', dataset: { testid: 'session-row', sessionId: s.id } },
          h(
            'div',
            { className: 'session-head' },
            h('strong', { className: 'row-title', dataset: { testid: 'session-title' } }),
            h('span', { className: 'row-sub', dataset: { testid: 'session-meta' } }),
            h('button', { type: 'button', className: 'button button-small button-danger', dataset: { testid: 'session-leave' } }, 'Leave'),
          ),
          h('ul', { className: 'members', dataset: { testid: 'session-members' }, 'aria-label': 'Members' }),
          h(
            'div',
            { className: 'send-group' },
            h('label', { className: 'visually-hidden', for: `invite-${s.id}` }, 'Invite a nearby peer'),
            h('select', { className: 'input input-small', id: `invite-${s.id}`, dataset: { testid: 'session-invite-peer' } }),
            h('button', { type: 'button', className: 'button button-small', dataset: { testid: 'session-invite' } }, 'Invite'),
          ),
          h('p', { className: 'hint', dataset: { testid: 'session-note' }, role: 'status' }),
          h('ol', { className: 'messages', dataset: { testid: 'session-messages' }, 'aria-label': 'Messages', 'aria-live': 'polite' }),
          h(
            'form',
            { className: 'message-form', id: formId, dataset: { testid: 'session-form' } },
            h('label', { className: 'visually-hidden', for: `text-${s.id}` }, 'Text to send to the session'),
            h('input', {
              className: 'input',
              id: `text-${s.id}`,
              type: 'text',
              autocomplete: 'off',
              placeholder: 'Send text to everyone connected',
              dataset: { testid: 'session-text' },
            }),
            h('button', { type: 'submit', className: 'button button-primary', dataset: { testid: 'session-send' } }, 'Send'),
          ),
          h('p', { className: 'field-error', role: 'alert', dataset: { testid: 'session-error' }, hidden: true }),
        );
        const id = s.id;
        const current = () => state.sessions.get(id);
        bindDraft(row.querySelector('[data-testid="session-text"]'), `session.${id}`);
        confirmButton(row.querySelector('[data-testid="session-leave"]'), 'Leave', 'Confirm leave', () => current() && leaveSession(current()));
        row.querySelector('[data-testid="session-invite"]').addEventListener('click', () => current() && invitePeer(current(), row));
        row.querySelector('form').addEventListener('submit', (event) => {
          event.preventDefault();
          if (current()) sendText(current(), row);
        });
        return row;
      },
      (row, s) => {
        const others = (s.members || []).filter((m) => !(state.me && m.id === state.me.id)).map((m) => peerName(m));
        setText(row.querySelector('[data-testid="session-title"]'), others.length > 0 ? `with ${others.join(', ')}` : 'Just you so far');
        setText(
          row.querySelector('[data-testid="session-meta"]'),
          s.ended ? `Ended: ${nodeLabel(s.hostNodeId)}, which hosted it, is unreachable` : sessionFacts(s),
        );
        row.dataset.ended = s.ended ? 'true' : 'false';
        for (const control of row.querySelectorAll('[data-testid="session-text"], [data-testid="session-send"]')) control.disabled = Boolean(s.ended);
        const members = [...(s.members || [])].sort((a, b) => peerName(a).localeCompare(peerName(b)));
        syncList(
          row.querySelector('[data-testid="session-members"]'),
          members,
          (m) => m.id,
          () =>
            h(
              'li',
              { className: 'member', dataset: { testid: 'session-member' } },
              h('span', { className: 'state-dot', 'aria-hidden': 'true' }),
              h('span', { dataset: { testid: 'session-member-name' } }),
              h('span', { className: 'pill', dataset: { testid: 'session-member-state' } }),
            ),
          (li, m) => {
            li.dataset.peerId = m.id;
            li.dataset.state = m.state;
            const you = state.me && m.id === state.me.id ? ' (you)' : '';
            setText(li.querySelector('[data-testid="session-member-name"]'), `${peerName(m)}${you}`);
            const pill = li.querySelector('[data-testid="session-member-state"]');
            setText(pill, MEMBER_STATE_LABELS[m.state] || m.state);
            pill.dataset.state = m.state;
          },
        );
        const memberIds = new Set(members.map((m) => m.id));
        fillPeerSelect(row.querySelector('[data-testid="session-invite-peer"]'), { exclude: memberIds });
        row.querySelector('[data-testid="session-invite"]').disabled =
          row.querySelector('[data-testid="session-invite-peer"]').disabled;
        const messages = state.messages.get(s.id) || [];
        syncList(
          row.querySelector('[data-testid="session-messages"]'),
          messages,
          (m) => m.key,
          (m) =>
            h(
              'li',
              { className: `message${m.mine ? ' is-mine' : ''}`, dataset: { testid: 'session-message', mine: m.mine ? 'true' : 'false' } },
              h('span', { className: 'message-from', dataset: { testid: 'session-message-from' } }, m.mine ? 'You' : peerName(m.from)),
              h('span', { className: 'message-text', dataset: { testid: 'session-message-text' } }, m.text),
              h('time', { className: 'message-time', datetime: m.at.toISOString() }, m.at.toLocaleTimeString()),
            ),
          () => {},
        );
      },
    );
    el.sessionsEmpty.hidden = sessions.length > 0;
    files.render(); // its session and peer pickers follow the sessions
    advanceDirectSends();
  }

  function applySessionState(data) {
    const session = state.sessions.get(data.sessionId);
    const peer = data.peer || {};
    if (!session) {
      refreshSessionsSoon();
      return;
    }
    const member = (session.members || []).find((m) => m.id === peer.id);
    if (member) member.state = data.state;
    else session.members = [...(session.members || []), { ...peer, state: data.state }];
    // We left (or were dropped), or someone's node went away: the node's list is the truth. A session's host drops
    // the members of a lost node (they are no longer shown), others keep them as offline until they return.
    if (data.state === 'notConnected') refreshSessionsSoon();
    renderSessions();
  }

  // ------------------------------------------------------ one-step send
  //
  // "Send file" on a nearby peer (or files dropped on their row): reuse a session in which they are connected,
  // or start one and invite them with a context that says what is coming ("Ann wants to send you slides.pdf
  // (30 MB)"): accepting it is their consent. Once they are connected the files go (Files shows the progress).

  const DIRECT_SEND_TIMEOUT_SECONDS = 120;
  const MAX_CONTEXT_NAME_CHARACTERS = 120;

  /** "slides.pdf (30 MB)" or "3 files (30 MB)". */
  function describeFiles(list) {
    const size = formatBytes(list.reduce((sum, file) => sum + file.size, 0));
    if (list.length !== 1) return `${list.length} files (${size})`;
    const name = [...list[0].name];
    const shown = name.length > MAX_CONTEXT_NAME_CHARACTERS ? `${name.slice(0, MAX_CONTEXT_NAME_CHARACTERS).join('')}…` : list[0].name;
    return `${shown} (${size})`;
  }

  /** A session in which the peer is connected (not a job offer's own pointToPoint session). */
  function sessionWith(peerId) {
    for (const session of state.sessions.values()) {
      if (session.strategy === 'pointToPoint') continue;
      if ((session.members || []).some((m) => m.id === peerId && m.state === 'connected')) return session;
    }
    return null;
  }

  function setDirectSend(peerId, entry) {
    state.directSends.set(peerId, entry);
    renderDirectSends();
  }

  /** Each nearby row's one-step-send status line. */
  function renderDirectSends() {
    for (const row of el.nearbyList.children) renderDirectSend(row);
  }

  /** A nearby row's one-step-send line: what is asked, then the files' progress (a bar) until "Sent". */
  function renderDirectSend(row) {
    const peerId = row.dataset.peerId;
    const direct = state.directSends.get(peerId);
    const entry = state.nearby.get(peerId);
    const progress = direct && direct.keys ? files.progressOf(direct.keys, peerName((entry || {}).peer || { id: peerId })) : null;
    const status = row.querySelector('[data-testid="nearby-status"]');
    if (status) setText(status, progress ? progress.text : direct ? direct.status : '');
    row.dataset.sendState = progress ? progress.phase : direct ? direct.phase : '';
    const bar = row.querySelector('[data-testid="nearby-progress"]');
    if (!bar) return;
    bar.hidden = !progress || progress.phase === 'sent' || progress.phase === 'failed';
    if (progress) {
      bar.max = Math.max(1, progress.total);
      bar.value = Math.min(bar.max, progress.done);
      bar.setAttribute('aria-label', `${progress.text} ${Math.round((100 * bar.value) / bar.max)}%`);
    }
  }

  async function sendFilesToPeer(peerId, list) {
    const entry = state.nearby.get(peerId);
    if (!entry || !signedIn()) return;
    const name = peerName(entry.peer);
    const what = describeFiles(list);
    const current = state.directSends.get(peerId);
    if (current && (current.phase === 'inviting' || current.phase === 'waiting')) {
      setDirectSend(peerId, { ...current, status: `Still waiting for ${name} to accept; send more once they have.` });
      return;
    }
    const session = sessionWith(peerId);
    if (session) {
      const keys = files.sendTo(session.id, peerId, list);
      setDirectSend(peerId, { phase: 'sent', keys, status: `Sending ${what} to ${name}…` });
      return;
    }
    setDirectSend(peerId, { phase: 'inviting', status: `Asking ${name}…` });
    let sessionId = '';
    const done = guard((fn) => fn());
    try {
      const created = await call('sessions', { method: 'POST', body: { strategy: 'cluster' } });
      sessionId = created.session.id;
      done(() => state.sessions.set(sessionId, created.session));
      const me = state.me ? peerName(state.me) : 'Someone';
      const result = await call('invitations', {
        method: 'POST',
        body: { to: peerId, session: sessionId, context: `${me} wants to send you ${what}`, timeoutSeconds: DIRECT_SEND_TIMEOUT_SECONDS },
      });
      done(() => {
        const inv = result.invitation;
        upsertInvitation(inv);
        setDirectSend(peerId, {
          phase: 'waiting',
          status: `Waiting for ${name} to accept ${what} · code ${inv.verificationCode}`,
          files: list,
          what,
          sessionId,
          invitationId: inv.id,
        });
        renderSessions();
      });
    } catch (err) {
      done(() => {
        setDirectSend(peerId, { phase: 'failed', status: `Not sent: ${err.message}` });
        if (sessionId) leaveQuietly(sessionId);
      });
    }
  }

  async function leaveQuietly(sessionId) {
    try {
      await call(`sessions/${encodeURIComponent(sessionId)}/members/me`, { method: 'DELETE' });
    } catch {
      // already gone
    }
    state.sessions.delete(sessionId);
    renderSessions();
  }

  /** Moves waiting one-step sends on: the files go once the peer is connected; a "no" is said. */
  function advanceDirectSends() {
    let changed = false;
    for (const [peerId, direct] of state.directSends) {
      if (direct.phase !== 'waiting') continue;
      const name = peerName((state.nearby.get(peerId) || {}).peer || { id: peerId });
      const inv = state.invitations.get(direct.invitationId);
      const why = inv && { declined: 'declined', expired: 'did not answer in time', canceled: 'was not asked after all' }[inv.state];
      if (why) {
        state.directSends.set(peerId, { phase: 'failed', status: `${name} ${why}: ${direct.what} was not sent.` });
        leaveQuietly(direct.sessionId);
        changed = true;
        continue;
      }
      const session = state.sessions.get(direct.sessionId);
      if (session && (session.members || []).some((m) => m.id === peerId && m.state === 'connected')) {
        const keys = files.sendTo(session.id, peerId, direct.files);
        state.directSends.set(peerId, { phase: 'sent', keys, status: `Sending ${direct.what} to ${name}…` });
        changed = true;
      }
    }
    if (changed) renderDirectSends();
  }

  // ------------------------------------------------------------ loading

  /** Whether this node lists everyone signed in (presence), not only the peers receiving jobs. */
  function presenceMode() {
    return Boolean(state.paths) && hasPath('/api/v1/presence');
  }

  async function loadAll() {
    if (!signedIn()) return;
    const g = guard((fn) => fn());
    const tasks = [
      // Browse and watch presence (idempotent PUTs): each answers with who is there right now. Watching presence
      // lives in the node's memory only, so it is asked again on every hello.
      loadFeatures().then(() =>
        Promise.all([
          call(`browsing/${JOBS_SERVICE}`, { method: 'PUT' }),
          presenceMode() ? call('presence', { method: 'PUT' }) : null,
        ]).then(([jobs, presence]) =>
          g(() => {
            state.jobPeers = new Map((jobs.peers || []).map((e) => [e.peer.id, e]));
            state.nearby = presence
              ? new Map((presence.peers || []).map((peer) => [peer.id, { peer }]))
              : new Map(state.jobPeers);
            renderNearby();
            state.nearbyLoaded = true;
          }),
        ),
      ),
      call('advertising').then((r) =>
        g(() => {
          state.receiving = (r.advertising || []).some((a) => a.serviceType === JOBS_SERVICE);
          renderReceiving();
        }),
      ),
      call('jobs').then((r) =>
        g(() => {
          state.jobs = new Map((r.jobs || []).map((j) => [j.id, j]));
          renderJobs();
        }),
      ),
      Promise.all([
        call('invitations', { query: { direction: 'incoming' } }),
        call('invitations', { query: { direction: 'outgoing' } }),
      ]).then(([incoming, outgoing]) =>
        g(() => {
          const merged = new Map();
          for (const inv of [...(incoming.invitations || []), ...(outgoing.invitations || [])]) merged.set(inv.id, inv);
          // Keep locally-known closed ones (the node may have pruned them).
          for (const [id, inv] of state.invitations) if (!merged.has(id) && inv.state !== 'pending') merged.set(id, inv);
          state.invitations = merged;
          renderInvitations();
          renderJobs();
        }),
      ),
      refreshSessions(),
      refreshMesh(),
      loadFeatures().then(() => {
        if (!hasPath('/api/v1/chats')) return refreshServices();
        // Rooms come and go nearby as peer.found / peer.lost on the chat service.
        return Promise.allSettled([
          call(`browsing/${CHAT_SERVICE}`, { method: 'PUT' }).finally(() => g(refreshServices)),
          g(() => chat.load()),
        ]);
      }),
      loadFeatures().then(() => (hasPath('/api/v1/transfers') ? g(() => files.load()) : undefined)),
    ];
    await Promise.allSettled(tasks);
  }

  // ------------------------------------------------------------- events

  function onEvent(event) {
    if (!signedIn()) return;
    if (hasPath('/api/v1/chats')) chat.onEvent(event);
    if (hasPath('/api/v1/transfers')) files.onEvent(event);
    const data = event.data && typeof event.data === 'object' ? event.data : {};
    switch (event.type) {
      case 'peer.found':
        if (state.services.has(data.serviceType) && data.peer && data.peer.id) {
          state.services.get(data.serviceType).set(data.peer.id, { peer: data.peer, discoveryInfo: data.discoveryInfo || {} });
          renderServices();
        }
        if (data.serviceType === JOBS_SERVICE && data.peer && data.peer.id) {
          state.jobPeers.set(data.peer.id, { peer: data.peer, discoveryInfo: data.discoveryInfo || {} });
          if (!presenceMode()) state.nearby.set(data.peer.id, { peer: data.peer });
          renderNearby();
        }
        break;
      case 'peer.lost':
        if (state.services.has(data.serviceType) && data.peer) {
          state.services.get(data.serviceType).delete(data.peer.id);
          renderServices();
        }
        if (data.serviceType === JOBS_SERVICE && data.peer) {
          state.jobPeers.delete(data.peer.id);
          if (!presenceMode()) state.nearby.delete(data.peer.id);
          renderNearby();
        }
        break;
      case 'presence.found':
        if (data.peer && data.peer.id && presenceMode()) {
          state.nearby.set(data.peer.id, { peer: data.peer });
          renderNearby();
        }
        break;
      case 'presence.lost':
        if (data.peer && presenceMode()) {
          state.nearby.delete(data.peer.id);
          state.jobPeers.delete(data.peer.id);
          renderNearby();
        }
        break;
      case 'node.linked':
        // Sessions that ended with this node are over for good once it is back.
        for (const [id, s] of state.sessions) if (s.ended && data.node && s.hostNodeId === data.node.id) state.sessions.delete(id);
        renderSessions();
        refreshMesh();
        break;
      case 'node.unlinked':
      case 'node.link.refused':
        refreshMesh();
        break;
      case 'invitation.received':
      case 'invitation.accepted':
      case 'invitation.declined':
      case 'invitation.expired':
      case 'invitation.canceled':
        upsertInvitation(data.invitation);
        if (event.type === 'invitation.received' && data.invitation && isIncoming(data.invitation)) {
          arrive(`${offerText(data.invitation)}.`, { tag: `invitation-${data.invitation.id}` });
        }
        if (event.type === 'invitation.accepted') refreshSessionsSoon();
        break;
      case 'session.peer.state':
        applySessionState(data);
        break;
      case 'session.data':
        if (!state.sessions.has(data.sessionId)) refreshSessionsSoon();
        addMessage(data.sessionId, {
          from: data.from,
          text: typeof data.text === 'string' ? data.text : `(${data.bytes ?? '?'} bytes of binary data)`,
          at: event.at ? new Date(event.at) : new Date(),
          mine: false,
        });
        renderSessions();
        break;
      case 'session.send.failed': {
        const row = el.sessionsList.querySelector(`[data-session-id="${CSS.escape(String(data.sessionId))}"]`);
        if (row) showError(row.querySelector('[data-testid="session-error"]'), `Not delivered to ${(data.undelivered || []).length} peer(s): ${data.reason}`);
        break;
      }
      case 'job.received':
      case 'job.delivered':
        upsertJob(data.job);
        if (event.type === 'job.received') renderPrompts(); // an accepted offer's prompt says "Added to your Jobs"
        break;
      case 'job.send.failed':
        if (data.jobId) {
          const who = peerName(data.to);
          const failure = {
            declined: `Declined by ${who}`,
            expired: `${who} did not answer in time`,
            canceled: `Offer to ${who} canceled`,
          }[data.reason] || `Not delivered to ${who}: ${data.reason}`;
          state.jobOffers.set(data.jobId, { failure });
          renderJobs();
        }
        break;
      default:
        break;
    }
  }

  // ------------------------------------------------------ public surface

  function renderAll() {
    document.body.dataset.signedIn = signedIn() ? 'true' : 'false';
    renderReceiving();
    renderNearby();
    renderServices();
    renderMesh();
    renderJobs();
    renderInvitations();
    renderSessions();
  }

  function init() {
    chat.init();
    files.init();
    initTabs();
    el.receiveJobs.addEventListener('change', () => setReceiving(el.receiveJobs.checked));
    el.browseForm.addEventListener('submit', browseService);
    el.jobForm.addEventListener('submit', onJobSubmit);
    el.jobCancelEdit.addEventListener('click', () => resetJobForm());
    byTestId('job-offer-to-cancel').addEventListener('click', () => {
      state.offerTo = null;
      renderOfferTo();
      jobFieldEl('name').focus();
    });
    el.jobForm.addEventListener('input', saveJobDraft);
    el.jobForm.addEventListener('input', updateJobNameCount);
    el.sessionCreate.addEventListener('click', createSession);
    renderAll();
    refreshMesh();
    loadFeatures();
    window.setInterval(() => {
      if (document.visibilityState === 'visible') refreshMesh();
    }, MESH_REFRESH_MS);
  }

  return {
    init,
    /** A peer signed in (or was adopted from another tab). */
    signIn(token, peer) {
      state.generation += 1;
      state.paused = false;
      state.token = token;
      state.me = peer || null;
      state.nearby.clear();
      state.jobPeers.clear();
      state.services.clear();
      state.nearbyLoaded = false;
      state.jobs.clear();
      state.jobOffers.clear();
      state.invitations.clear();
      state.promptProblems.clear();
      state.acceptedOffers.clear();
      state.directSends.clear();
      state.offerTo = null;
      state.sessions.clear();
      state.messages.clear();
      state.receiving = false;
      resetJobForm({ forget: false });
      restoreJobDraft();
      chat.signIn();
      files.signIn();
      renderAll();
    },
    setPeer(peer) {
      state.me = peer || state.me;
      renderSessions();
    },
    signOut() {
      state.generation += 1;
      state.paused = false;
      state.token = null;
      state.me = null;
      state.nearby.clear();
      state.jobPeers.clear();
      state.services.clear();
      state.jobs.clear();
      state.invitations.clear();
      state.sessions.clear();
      state.messages.clear();
      resetJobForm({ forget: false });
      chat.signOut();
      files.signOut();
      renderAll();
    },
    /** The peer left the mesh for good: its drafts go with it. */
    forgetDrafts,
    /** Stop (or resume) asking the node anything while the peer is being deleted. */
    setPaused(paused) {
      state.paused = paused;
    },
    /** Every socket hello (first connect and reconnects): reload from REST. */
    onHello() {
      loadAll();
    },
    onEvent,
    /** Files shared to the dashboard (share.js): the Files view shows them, ready to send. */
    receiveShared(shared) {
      files.setShared(shared);
      selectView('files');
    },
    /** Called twice a second by app.js: countdowns. */
    tick() {
      if (!signedIn()) return;
      files.tick();
      for (const row of el.promptList.children) {
        const inv = state.invitations.get(row.dataset.key);
        if (inv) setText(row.querySelector('[data-testid="prompt-expires"]'), expiresText(inv));
      }
    },
  };
}
