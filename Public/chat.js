// meshgate dashboard: the Chat view. Host a room, browse the rooms advertised
// nearby, join one, see its members and messages (the whole history on a
// rejoin), send, leave. Created by dashboard.js, which hands it its helpers
// and forwards the socket's hello and events.
//
// REST: POST /chats {name}; GET /chats; GET /chats/nearby; GET /chats/{id};
// POST /chats/{id}/join; POST|GET /chats/{id}/messages; POST /chats/{id}/leave.
// Events: chat.message, chat.member.joined, chat.member.left, chat.ended, and
// peer.found / peer.lost on jobmanager-chat (rooms coming and going nearby).
//
// A typed message is never lost: the composer's text is a per-room draft in
// localStorage, and it is cleared only once the node has taken the message.
// Every message carries a client id chosen when it is first sent, so sending
// again after a timeout can never post it twice.
//
// A message from someone else that names you with an @ ("@Bob") is an arrival: said in the live region and
// alerted as you chose (arrivals.js, alerts.js).

import { arrive } from './arrivals.js';

export const CHAT_SERVICE = 'jobmanager-chat';
const KEY_OPEN = 'meshgate.chat.open';
const REFRESH_DEBOUNCE_MS = 150;
const HISTORY_PAGE = 500;
const HISTORY_MAX_PAGES = 20;
const NEAR_BOTTOM_PX = 48;
const MAX_ROOM_NAME_CHARACTERS = 63; // the node's rule for a room name: code points (docs/api.md, Names)

/**
 * @param {object} deps from dashboard.js: h, call, setText, byTestId, storage, syncList,
 *   animateIn, animateOut, getDraft, setDraft, bindDraft, guard, peerName, nodeName,
 *   showError, me, signedIn, isViewVisible
 */
export function createChat(deps) {
  const { h, call, setText, byTestId, storage, syncList, animateIn, animateOut, guard, peerName, nodeName, showError } =
    deps;

  const state = {
    chats: new Map(), // id → chat (hosted or joined)
    nearby: [], // chats advertised nearby
    nearbyLoaded: false,
    openId: null,
    room: null, // {chat, members} of the open room
    status: '', // note on the open room (joining, ended…)
    messages: new Map(), // chatId → Map(messageId → message)
    unread: new Map(), // chatId → count
  };

  const el = {
    tab: byTestId('tab-chat'),
    badge: byTestId('chat-badge'),
    hostForm: byTestId('chat-host-form'),
    hostName: byTestId('chat-host-name'),
    hostCount: byTestId('chat-host-count'),
    hostButton: byTestId('chat-host'),
    hostError: byTestId('chat-host-error'),
    refresh: byTestId('chat-refresh'),
    nearbyEmpty: byTestId('chat-nearby-empty'),
    nearbyList: byTestId('chat-nearby-list'),
    roomsEmpty: byTestId('chat-rooms-empty'),
    roomsList: byTestId('chat-rooms-list'),
    room: byTestId('chat-room'),
    roomName: byTestId('chat-room-name'),
    roomHost: byTestId('chat-room-host'),
    roomStatus: byTestId('chat-room-status'),
    leave: byTestId('chat-leave'),
    members: byTestId('chat-members'),
    messageList: byTestId('chat-messages'),
    messagesEmpty: byTestId('chat-messages-empty'),
    form: byTestId('chat-form'),
    input: byTestId('chat-input'),
    send: byTestId('chat-send'),
    error: byTestId('chat-error'),
  };

  const mine = (ref) => Boolean(ref && deps.me() && ref.id === deps.me().id);

  /** A client message id: 32 hex digits (crypto.randomUUID needs a secure context; plain LAN http is not). */
  function newMessageId() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return [...bytes].map((b) => b.toString(16).padStart(2, '0')).join('');
  }

  function debounce(fn) {
    let timer = 0;
    return () => {
      window.clearTimeout(timer);
      timer = window.setTimeout(guard(fn), REFRESH_DEBOUNCE_MS);
    };
  }

  // ------------------------------------------------------------ loading

  async function refreshChats() {
    try {
      const result = await call('chats');
      state.chats = new Map((result.chats || []).map((c) => [c.id, c]));
      if (state.room && state.chats.has(state.room.chat.id)) state.room.chat = state.chats.get(state.room.chat.id);
      render();
    } catch {
      // The next hello reloads everything.
    }
  }

  async function refreshNearby() {
    try {
      const result = await call('chats/nearby');
      state.nearby = result.chats || [];
      renderNearby();
      state.nearbyLoaded = true;
    } catch {
      // Kept as it was; the next event or hello tries again.
    }
  }

  const refreshChatsSoon = debounce(refreshChats);
  const refreshNearbySoon = debounce(refreshNearby);
  const refreshRoomSoon = debounce(() => state.openId && loadRoom(state.openId, { history: false }));

  /** Room details (members) and, unless told otherwise, its whole message history. */
  async function loadRoom(id, { history = true } = {}) {
    const done = guard((result) => {
      if (state.openId !== id) return;
      state.room = { chat: result.chat, members: result.members || [] };
      state.chats.set(id, result.chat);
      render();
    });
    try {
      done(await call(`chats/${encodeURIComponent(id)}`));
    } catch (err) {
      if (state.openId === id) {
        if (err.status === 404) {
          closeRoom();
          state.chats.delete(id);
          render();
        } else {
          setStatus(`Could not load the room: ${err.message}`);
        }
      }
      return;
    }
    if (history && state.room && state.room.chat.joined) await loadHistory(id);
  }

  async function loadHistory(id) {
    let after = '';
    for (let page = 0; page < HISTORY_MAX_PAGES; page += 1) {
      let result;
      try {
        result = await call(`chats/${encodeURIComponent(id)}/messages`, { query: { after, limit: HISTORY_PAGE } });
      } catch (err) {
        if (state.openId === id) setStatus(`Could not load the messages: ${err.message}`);
        return;
      }
      for (const message of result.messages || []) upsertMessage(message, { count: false });
      if (!result.nextCursor) break;
      after = result.nextCursor;
    }
    if (state.openId === id) renderRoom({ scroll: true });
  }

  /** A message from someone else that names this peer with an @: "@Bob, can you…". */
  function mentionsMe(message) {
    const me = deps.me();
    if (!me || !me.displayName || mine(message.from) || typeof message.body !== 'string') return false;
    return message.body.toLowerCase().includes(`@${me.displayName.toLowerCase()}`);
  }

  function upsertMessage(message, { count = true } = {}) {
    if (!message || !message.id || !message.chatId) return false;
    let map = state.messages.get(message.chatId);
    if (!map) state.messages.set(message.chatId, (map = new Map()));
    const known = map.get(message.id);
    map.set(message.id, known ? { ...known, ...message, seq: message.seq ?? known.seq } : message);
    const unseen = !known && count && !mine(message.from) && !(state.openId === message.chatId && deps.isViewVisible());
    if (unseen) state.unread.set(message.chatId, (state.unread.get(message.chatId) || 0) + 1);
    return !known;
  }

  // ------------------------------------------------------------- actions

  function setStatus(text) {
    state.status = text || '';
    el.roomStatus.hidden = !state.status;
    setText(el.roomStatus, state.status);
  }

  function openRoom(id, { focus = false } = {}) {
    if (state.openId !== id) {
      state.openId = id;
      state.room = state.chats.has(id) ? { chat: state.chats.get(id), members: [] } : null;
      setStatus('');
      showError(el.error, '');
      el.input.value = '';
      el.input.dataset.draft = `chat.${id}`;
      el.input.value = deps.getDraft(`chat.${id}`);
    }
    storage.set(KEY_OPEN, id);
    state.unread.delete(id);
    render();
    const loaded = loadRoom(id);
    // Focus the composer without scrolling the page down to it: the room's top (its name, members and the
    // newest messages) stays where the reader expects it, also on a phone. Checked again once the room and its
    // history have loaded: the lists above the room change height as it moves into "Your rooms".
    if (focus) {
      el.input.focus({ preventScroll: true });
      // The tab bar sticks to the top of the screen once scrolled: the page's scroll-padding-top is its height,
      // so the room's top goes just below it.
      const keepTopInView = () => {
        const tabs = document.querySelector('.tabs');
        const covered = tabs ? Math.max(0, tabs.getBoundingClientRect().bottom) : 0;
        const top = el.room.getBoundingClientRect().top;
        if (top < covered || top > window.innerHeight) el.room.scrollIntoView({ block: 'start', behavior: 'instant' });
      };
      keepTopInView();
      Promise.resolve(loaded).finally(() => window.requestAnimationFrame(() => state.openId === id && keepTopInView()));
    }
  }

  function closeRoom() {
    state.openId = null;
    state.room = null;
    storage.remove(KEY_OPEN);
    delete el.input.dataset.draft;
    el.input.value = '';
    setStatus('');
  }

  /**
   * The node's rule for a room name (1–63 characters counted as code points, not only spaces, no control
   * characters); null when it is fine. `raw` is what was typed, `name` the same without surrounding spaces.
   */
  function roomNameProblem(name, raw = name) {
    if (!name) return raw ? 'A room name needs a letter, digit or symbol, not only spaces.' : 'Give the room a name.';
    const over = [...name].length - MAX_ROOM_NAME_CHARACTERS;
    if (over > 0) {
      return `Too long by ${over} character${over === 1 ? '' : 's'}: a room name holds ${MAX_ROOM_NAME_CHARACTERS} characters (an emoji made of several, like a flag, counts as several).`;
    }
    if (/\p{Cc}/u.test(name)) return 'A room name cannot contain control characters.';
    return null;
  }

  /** "12 / 63 characters" under the room name. */
  function updateRoomCount() {
    const characters = [...el.hostName.value.trim()].length;
    setText(el.hostCount, `${characters} / ${MAX_ROOM_NAME_CHARACTERS} characters`);
    el.hostCount.classList.toggle('is-over', characters > MAX_ROOM_NAME_CHARACTERS);
  }

  async function host(event) {
    event.preventDefault();
    const name = el.hostName.value.trim();
    showError(el.hostError, '');
    const problem = roomNameProblem(name, el.hostName.value);
    if (problem) {
      showError(el.hostError, problem);
      el.hostName.setAttribute('aria-invalid', 'true');
      el.hostName.focus();
      return;
    }
    el.hostButton.disabled = true;
    try {
      const result = await call('chats', { method: 'POST', body: { name } });
      el.hostName.value = '';
      updateRoomCount();
      deps.setDraft('chat.host', '');
      state.chats.set(result.chat.id, result.chat);
      openRoom(result.chat.id, { focus: true });
    } catch (err) {
      showError(el.hostError, err.status === 0 ? `${err.message} The name is kept; try again.` : err.message);
      el.hostName.focus();
    } finally {
      el.hostButton.disabled = false;
    }
  }

  async function join(chat, button) {
    button.disabled = true;
    const row = button.closest('li');
    const error = row && row.querySelector('[data-testid="chat-join-error"]');
    if (error) showError(error, '');
    try {
      const result = await call(`chats/${encodeURIComponent(chat.id)}/join`, { method: 'POST' });
      state.chats.set(result.chat.id, result.chat);
      openRoom(result.chat.id, { focus: true });
      if (!result.chat.joined) setStatus(`Joining… waiting for ${peerName(chat.host)}'s node to answer.`);
    } catch (err) {
      if (error) showError(error, `Could not join: ${err.message}`);
    } finally {
      button.disabled = false;
    }
  }

  async function leave() {
    const id = state.openId;
    if (!id) return;
    el.leave.disabled = true;
    try {
      await call(`chats/${encodeURIComponent(id)}/leave`, { method: 'POST' });
    } catch (err) {
      if (err.status !== 404) {
        showError(el.error, `Could not leave: ${err.message}`);
        el.leave.disabled = false;
        return;
      }
    }
    el.leave.disabled = false;
    deps.setDraft(`chat.${id}`, '');
    deps.setDraft(`chat.${id}.id`, '');
    state.messages.delete(id);
    closeRoom();
    await Promise.allSettled([refreshChats(), refreshNearby()]);
    render();
  }

  async function send(event) {
    event.preventDefault();
    const id = state.openId;
    const body = el.input.value;
    if (!id || !body.trim()) return;
    showError(el.error, '');
    // The same id for every attempt at this text: a retry after a lost answer is not posted twice.
    let messageId = deps.getDraft(`chat.${id}.id`);
    if (!messageId) {
      messageId = newMessageId();
      deps.setDraft(`chat.${id}.id`, messageId);
    }
    el.send.disabled = true;
    try {
      const result = await call(`chats/${encodeURIComponent(id)}/messages`, {
        method: 'POST',
        body: { body, id: messageId },
      });
      upsertMessage(result.message, { count: false });
      // Cleared only now that the node has it, and only if nothing new was typed meanwhile.
      if (state.openId === id && el.input.value === body) el.input.value = '';
      deps.setDraft(`chat.${id}`, state.openId === id ? el.input.value : '');
      deps.setDraft(`chat.${id}.id`, '');
      renderRoom({ scroll: true });
    } catch (err) {
      const why = err.status === 0 ? `${err.message} It is sent when you press Send again.` : err.message;
      showError(el.error, `Not sent (your message is kept): ${why}`);
      // A rejected text (too long, not a member) gets a new id once it is edited and sent again.
      if (err.status >= 400 && err.status < 500) deps.setDraft(`chat.${id}.id`, '');
    } finally {
      el.send.disabled = false;
      if (state.openId === id) el.input.focus({ preventScroll: true });
    }
  }

  // ------------------------------------------------------------- render

  function renderNearby() {
    const rooms = deps.signedIn() ? state.nearby : [];
    syncList(
      el.nearbyList,
      rooms,
      (c) => c.id,
      (c) => {
        const row = h(
          'li',
          { className: 'row chat-nearby-row', dataset: { testid: 'chat-nearby-room', chatId: c.id } },
          h('span', { className: 'avatar', 'aria-hidden': 'true' }, '#'),
          h(
            'div',
            { className: 'row-main' },
            h('strong', { className: 'row-title', dataset: { testid: 'chat-nearby-name' } }),
            h('span', { className: 'row-sub', dataset: { testid: 'chat-nearby-host' } }),
          ),
          h('button', { type: 'button', className: 'button button-small button-primary', dataset: { testid: 'chat-join' } }),
          h('p', { className: 'field-error row-error', role: 'alert', dataset: { testid: 'chat-join-error' }, hidden: true }),
        );
        const id = c.id;
        row.querySelector('[data-testid="chat-join"]').addEventListener('click', (event) => {
          const current = state.nearby.find((n) => n.id === id);
          if (!current) return;
          if (state.chats.get(id)?.joined) openRoom(id, { focus: true });
          else join(current, event.currentTarget);
        });
        if (state.nearbyLoaded) animateIn(row);
        return row;
      },
      (row, c) => {
        setText(row.querySelector('[data-testid="chat-nearby-name"]'), c.name);
        const count = Number.isFinite(c.memberCount) ? ` · ${c.memberCount} in the room` : '';
        setText(
          row.querySelector('[data-testid="chat-nearby-host"]'),
          `hosted by ${peerName(c.host)} · ${nodeName(c.host && c.host.nodeId)}${count}`,
        );
        const joined = Boolean(state.chats.get(c.id)?.joined);
        const button = row.querySelector('[data-testid="chat-join"]');
        setText(button, joined ? 'Open' : 'Join');
        button.setAttribute('aria-label', `${joined ? 'Open' : 'Join'} ${c.name}`);
      },
      animateOut,
    );
    el.nearbyEmpty.hidden = rooms.length > 0;
  }

  function renderRooms() {
    const rooms = deps.signedIn()
      ? [...state.chats.values()].sort((a, b) => String(a.name).localeCompare(String(b.name)))
      : [];
    syncList(
      el.roomsList,
      rooms,
      (c) => c.id,
      (c) => {
        const row = h(
          'li',
          { className: 'row chat-room-row', dataset: { testid: 'chat-room-row', chatId: c.id } },
          h(
            'div',
            { className: 'row-main' },
            h('strong', { className: 'row-title', dataset: { testid: 'chat-room-row-name' } }),
            h('span', { className: 'row-sub', dataset: { testid: 'chat-room-row-meta' } }),
          ),
          h('span', { className: 'tab-badge', dataset: { testid: 'chat-unread' }, hidden: true }),
          h('button', { type: 'button', className: 'button button-small', dataset: { testid: 'chat-open' } }),
        );
        const id = c.id;
        row.querySelector('[data-testid="chat-open"]').addEventListener('click', (event) => {
          const current = state.chats.get(id);
          if (!current) return;
          if (current.joined || current.ended) openRoom(id, { focus: true });
          else join(current, event.currentTarget);
        });
        return row;
      },
      (row, c) => {
        row.dataset.joined = c.joined ? 'true' : 'false';
        row.dataset.ended = c.ended ? 'true' : 'false';
        row.classList.toggle('is-open', c.id === state.openId);
        setText(row.querySelector('[data-testid="chat-room-row-name"]'), c.name);
        const role = mine(c.host) ? 'you host it' : `hosted by ${peerName(c.host)}`;
        const members = Number.isFinite(c.memberCount) ? `${c.memberCount} in the room` : '';
        const where = c.ended ? 'ended' : c.joined ? '' : 'you left';
        setText(row.querySelector('[data-testid="chat-room-row-meta"]'), [role, members, where].filter(Boolean).join(' · '));
        const unread = state.unread.get(c.id) || 0;
        const pill = row.querySelector('[data-testid="chat-unread"]');
        pill.hidden = unread === 0;
        setText(pill, String(unread));
        pill.setAttribute('aria-label', `${unread} unread`);
        const button = row.querySelector('[data-testid="chat-open"]');
        const label = c.joined || c.ended ? (c.id === state.openId ? 'Open now' : 'Open') : 'Rejoin';
        setText(button, label);
        button.disabled = c.id === state.openId && (c.joined || c.ended);
        button.setAttribute('aria-label', `${label} ${c.name}`);
      },
    );
    el.roomsEmpty.hidden = rooms.length > 0;
  }

  function sortedMessages(id) {
    const map = state.messages.get(id);
    if (!map) return [];
    return [...map.values()].sort((a, b) => {
      const x = a.seq ?? Number.MAX_SAFE_INTEGER;
      const y = b.seq ?? Number.MAX_SAFE_INTEGER;
      return x !== y ? x - y : String(a.at).localeCompare(String(b.at));
    });
  }

  function renderRoom({ scroll = false } = {}) {
    const room = deps.signedIn() && state.openId ? state.room : null;
    el.room.hidden = !state.openId || !deps.signedIn();
    if (!state.openId || !deps.signedIn()) return;
    const chat = room ? room.chat : state.chats.get(state.openId);
    setText(el.roomName, chat ? chat.name : 'Room');
    el.room.dataset.chatId = state.openId;
    if (chat) {
      const host = mine(chat.host) ? 'You host this room' : `Hosted by ${peerName(chat.host)} · ${nodeName(chat.host?.nodeId)}`;
      setText(el.roomHost, host);
      el.room.dataset.joined = chat.joined ? 'true' : 'false';
      el.room.dataset.ended = chat.ended ? 'true' : 'false';
      if (chat.ended) setStatus('This room has ended: its host left and no member remains.');
      else if (chat.joined && state.status.startsWith('Joining')) setStatus('');
      else if (!chat.joined && !state.status) setStatus('You are not in this room. Rejoin it to read and send messages.');
    }
    const usable = Boolean(chat && chat.joined && !chat.ended);
    el.input.disabled = !usable;
    el.send.disabled = !usable;
    el.leave.hidden = !chat || !chat.joined;

    const members = room ? [...room.members] : [];
    members.sort((a, b) => (a.role === b.role ? peerName(a.peer).localeCompare(peerName(b.peer)) : a.role === 'host' ? -1 : 1));
    syncList(
      el.members,
      members,
      (m) => m.peer.id,
      (m) => {
        const li = h(
          'li',
          { className: 'member chat-member', dataset: { testid: 'chat-member', peerId: m.peer.id } },
          h('span', { className: 'avatar avatar-small', 'aria-hidden': 'true' }),
          h('span', { dataset: { testid: 'chat-member-name' } }),
          h('span', { className: 'pill', dataset: { testid: 'chat-member-role' } }),
        );
        animateIn(li);
        return li;
      },
      (li, m) => {
        li.dataset.role = m.role;
        const name = peerName(m.peer);
        // A member on a node this one has lost is offline: greyed, and said.
        const online = mine(m.peer) || !deps.nodeReachable || deps.nodeReachable(m.peer.nodeId);
        li.dataset.online = online ? 'true' : 'false';
        li.classList.toggle('is-offline', !online);
        setText(li.querySelector('.avatar'), name.slice(0, 1).toUpperCase());
        setText(li.querySelector('[data-testid="chat-member-name"]'), `${name}${mine(m.peer) ? ' (you)' : ''}`);
        const pill = li.querySelector('[data-testid="chat-member-role"]');
        const words = [m.role === 'host' ? 'host' : '', online ? '' : 'offline'].filter(Boolean).join(' · ');
        pill.hidden = !words;
        setText(pill, words);
      },
      animateOut,
    );

    const list = el.messageList;
    const nearBottom = list.scrollHeight - list.scrollTop - list.clientHeight < NEAR_BOTTOM_PX;
    const messages = sortedMessages(state.openId);
    syncList(
      list,
      messages,
      (m) => m.id,
      (m) =>
        h(
          'li',
          {
            className: `message${mine(m.from) ? ' is-mine' : ''}`,
            dataset: { testid: 'chat-message', messageId: m.id, mine: mine(m.from) ? 'true' : 'false' },
          },
          h('span', { className: 'message-from', dataset: { testid: 'chat-message-from' } }, mine(m.from) ? 'You' : peerName(m.from)),
          h('span', { className: 'message-text', dataset: { testid: 'chat-message-body' } }, m.body),
          h('time', { className: 'message-time', datetime: m.at }, new Date(m.at).toLocaleTimeString()),
          h('span', { className: 'message-pending hint', dataset: { testid: 'chat-message-pending' } }),
        ),
      (li, m) => {
        li.dataset.seq = m.seq === null || m.seq === undefined ? '' : String(m.seq);
        li.dataset.pending = m.seq === null || m.seq === undefined ? 'true' : 'false';
        // Not ordered by the host yet (seq null): the others may not have it.
        setText(
          li.querySelector('[data-testid="chat-message-pending"]'),
          li.dataset.pending === 'true' ? 'not yet delivered to everyone' : '',
        );
      },
    );
    el.messagesEmpty.hidden = messages.length > 0 || !usable;
    if (scroll || nearBottom) list.scrollTop = list.scrollHeight;
  }

  function renderBadge() {
    let unread = 0;
    for (const count of state.unread.values()) unread += count;
    el.badge.hidden = unread === 0;
    setText(el.badge, String(unread));
    el.badge.setAttribute('aria-label', `${unread} unread`);
  }

  function render() {
    renderNearby();
    renderRooms();
    renderRoom();
    renderBadge();
  }

  // ------------------------------------------------------------- events

  function onEvent(event) {
    const data = event.data && typeof event.data === 'object' ? event.data : {};
    const chatId = data.chat && data.chat.id;
    switch (event.type) {
      case 'chat.message': {
        if (!data.message) return;
        const fresh = upsertMessage({ ...data.message, chatId: data.message.chatId || chatId });
        if (fresh && mentionsMe(data.message)) {
          const room = (state.chats.get(chatId) || data.chat || {}).name || 'a room';
          arrive(`${deps.peerName(data.message.from)} mentioned you in ${room}: ${data.message.body}`, { tag: `chat-${data.message.id}` });
        }
        if (!state.chats.has(chatId)) refreshChatsSoon();
        if (chatId === state.openId) renderRoom();
        renderRooms();
        renderBadge();
        return;
      }
      case 'chat.member.joined':
      case 'chat.member.left':
        if (chatId === state.openId) refreshRoomSoon();
        refreshChatsSoon();
        refreshNearbySoon();
        return;
      case 'chat.ended':
        refreshChatsSoon();
        refreshNearbySoon();
        if (chatId === state.openId) refreshRoomSoon();
        return;
      case 'peer.found':
      case 'peer.lost':
      case 'peer.updated':
        if (data.serviceType === CHAT_SERVICE || event.type === 'peer.updated') refreshNearbySoon();
        return;
      default:
    }
  }

  // ------------------------------------------------------ public surface

  return {
    init() {
      el.hostForm.addEventListener('submit', host);
      el.form.addEventListener('submit', send);
      el.refresh.addEventListener('click', () => {
        refreshNearby();
        refreshChats();
      });
      el.leave.addEventListener('click', leave);
      el.input.addEventListener('keydown', (event) => {
        if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
          event.preventDefault();
          el.form.requestSubmit();
        }
      });
      el.input.addEventListener('input', () => {
        if (el.input.dataset.draft) deps.setDraft(el.input.dataset.draft, el.input.value);
      });
      el.hostName.addEventListener('input', () => {
        deps.setDraft('chat.host', el.hostName.value);
        // Said while typing once it is too long (never cut silently); an error shown goes when it is fixed.
        const name = el.hostName.value.trim();
        updateRoomCount();
        const problem = el.hostName.value === '' && el.hostError.hidden ? null : roomNameProblem(name, el.hostName.value);
        showError(el.hostError, problem || '');
        if (problem) el.hostName.setAttribute('aria-invalid', 'true');
        else el.hostName.removeAttribute('aria-invalid');
      });
      render();
    },
    signIn() {
      const open = storage.get(KEY_OPEN);
      state.chats.clear();
      state.nearby = [];
      state.nearbyLoaded = false;
      state.messages.clear();
      state.unread.clear();
      closeRoom();
      el.hostName.value = deps.getDraft('chat.host');
      updateRoomCount();
      if (open) {
        state.openId = open;
        storage.set(KEY_OPEN, open);
        el.input.dataset.draft = `chat.${open}`;
        el.input.value = deps.getDraft(`chat.${open}`);
      }
      render();
    },
    signOut() {
      state.chats.clear();
      state.nearby = [];
      state.messages.clear();
      state.unread.clear();
      closeRoom();
      el.hostName.value = '';
      updateRoomCount();
      render();
    },
    /** Every hello: reload the lists, the open room and its history (missed messages included). */
    async load() {
      await Promise.allSettled([refreshChats(), refreshNearby()]);
      if (state.openId) {
        if (state.chats.has(state.openId)) await loadRoom(state.openId);
        else closeRoom();
      }
      render();
    },
    onEvent,
    /** The mesh changed (a node lost or back): members on it go offline or online. */
    meshChanged() {
      renderRoom();
    },
    /** The Chat tab was shown: what is on screen is read. */
    shown() {
      if (state.openId) state.unread.delete(state.openId);
      render();
    },
  };
}
