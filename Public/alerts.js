// Opt-in alerts for arrivals (offers, invitations, incoming files, chat mentions): a system notification and a
// chime. Both are off until the person turns them on in the You panel, and each choice is kept in localStorage.
//
// - Notification: permission is asked only from a click on its switch (never on page load). A notification is
//   shown only while the page is hidden or not focused; a visible page has its own prompts and live region.
//   Browsers offer notifications only in a secure context (HTTPS or localhost): elsewhere the switch says so.
// - Chime: two short sine tones made with the Web Audio API (no sound file). The AudioContext is created by the
//   click that turns the chime on (browsers start audio only after a gesture); after a reload it is resumed on
//   the page's first click or key press.

const KEY_NOTIFY = 'meshgate.alerts.notify';
const KEY_CHIME = 'meshgate.alerts.chime';

let audio = null;
let el = null;

function stored(key) {
  try {
    return window.localStorage.getItem(key) === 'on';
  } catch {
    return false;
  }
}

function store(key, on) {
  try {
    if (on) window.localStorage.setItem(key, 'on');
    else window.localStorage.removeItem(key);
  } catch {
    // Storage unavailable: the choice lasts as long as the page.
  }
}

function notificationsPossible() {
  return window.isSecureContext && typeof window.Notification === 'function';
}

/** role=switch: keep aria-checked in step with the checkbox. */
function sync() {
  el.notify.setAttribute('aria-checked', el.notify.checked ? 'true' : 'false');
  el.chime.setAttribute('aria-checked', el.chime.checked ? 'true' : 'false');
}

function say(text) {
  el.status.hidden = !text;
  el.status.textContent = text || '';
}

function audioContext() {
  const Context = window.AudioContext || window.webkitAudioContext;
  if (!Context) return null;
  if (!audio) audio = new Context();
  if (audio.state === 'suspended') audio.resume().catch(() => {});
  return audio;
}

/** Two soft sine tones, 880 Hz then 1320 Hz, 0.3 s in all. */
export function chime() {
  const context = audioContext();
  if (!context) return;
  const start = context.currentTime + 0.01;
  [880, 1320].forEach((frequency, i) => {
    const oscillator = context.createOscillator();
    const gain = context.createGain();
    const at = start + i * 0.15;
    oscillator.type = 'sine';
    oscillator.frequency.setValueAtTime(frequency, at);
    // A quick rise and an exponential fall: no click at either end.
    gain.gain.setValueAtTime(0.0001, at);
    gain.gain.exponentialRampToValueAtTime(0.2, at + 0.02);
    gain.gain.exponentialRampToValueAtTime(0.0001, at + 0.14);
    oscillator.connect(gain).connect(context.destination);
    oscillator.start(at);
    oscillator.stop(at + 0.15);
  });
}

async function onNotifyChange() {
  sync();
  if (!el.notify.checked) {
    store(KEY_NOTIFY, false);
    say('');
    return;
  }
  if (!notificationsPossible()) {
    el.notify.checked = false;
    sync();
    say('This browser offers notifications only on HTTPS or localhost pages.');
    return;
  }
  let permission = window.Notification.permission;
  if (permission === 'default') {
    el.notify.disabled = true;
    try {
      permission = await window.Notification.requestPermission();
    } catch {
      permission = 'denied';
    } finally {
      el.notify.disabled = false;
    }
  }
  const on = permission === 'granted';
  el.notify.checked = on;
  sync();
  store(KEY_NOTIFY, on);
  say(on ? '' : 'Notifications are blocked for this page: allow them in the browser’s site settings, then turn this on.');
}

function onChimeChange() {
  sync();
  store(KEY_CHIME, el.chime.checked);
  if (el.chime.checked) chime(); // this click unlocks the audio, and the person hears what it sounds like
}

/** Wires the two switches (You panel) and restores the choices kept in localStorage. */
export function initAlerts() {
  el = {
    notify: document.querySelector('[data-testid="alerts-notify"]'),
    chime: document.querySelector('[data-testid="alerts-chime"]'),
    status: document.querySelector('[data-testid="alerts-status"]'),
  };
  el.notify.checked = stored(KEY_NOTIFY) && notificationsPossible() && window.Notification.permission === 'granted';
  el.chime.checked = stored(KEY_CHIME);
  sync();
  el.notify.addEventListener('change', onNotifyChange);
  el.chime.addEventListener('change', onChimeChange);
  if (el.chime.checked) {
    const unlock = () => {
      audioContext();
      window.removeEventListener('pointerdown', unlock, true);
      window.removeEventListener('keydown', unlock, true);
    };
    window.addEventListener('pointerdown', unlock, true);
    window.addEventListener('keydown', unlock, true);
  }
}

/** Alerts the person to an arrival, as they chose: a notification (page hidden or unfocused) and a chime. */
export function alertArrival(text, { tag } = {}) {
  if (!el) return;
  if (el.notify.checked && notificationsPossible() && window.Notification.permission === 'granted'
    && (document.visibilityState === 'hidden' || !document.hasFocus())) {
    try {
      const note = new window.Notification('meshgate', { body: text, tag, icon: 'favicon.svg' });
      note.addEventListener('click', () => {
        window.focus();
        note.close();
      });
    } catch {
      // Some browsers allow notifications only from a service worker: the live region has said it anyway.
    }
  }
  if (el.chime.checked) chime();
}
