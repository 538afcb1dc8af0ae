// meshgate service worker: receives files shared to the installed dashboard (the web app manifest's
// share_target: Android's share sheet, desktop Chromium's share menu).
//
// The share arrives as a POST of multipart/form-data to ./share-target. The worker keeps the files in the
// Cache API (only the latest share; older ones are dropped), then redirects (303) to ./?share=<id>#files, where
// the page (share.js) takes them out of the cache and offers them in the Files view, ready to send.
// Every other request goes to the network untouched. Service workers exist only in a secure context: HTTPS or
// localhost (see README, "Dashboard").

const SHARE_CACHE = 'meshgate-share';
const MAX_FILES = 50;

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

self.addEventListener('fetch', (event) => {
  const request = event.request;
  if (request.method !== 'POST') return;
  const action = new URL('share-target', self.registration.scope);
  const url = new URL(request.url);
  if (url.origin !== action.origin || url.pathname !== action.pathname) return;
  event.respondWith(receiveShare(request));
});

async function receiveShare(request) {
  const id = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
  const page = (query) => Response.redirect(new URL(`./?${query}#files`, self.registration.scope).href, 303);
  try {
    const form = await request.formData();
    // A form's empty file field still sends a part (no name, no bytes): that is not a file.
    const files = form
      .getAll('files')
      .filter((value) => typeof value === 'object' && value !== null && (value.name !== '' || value.size > 0))
      .slice(0, MAX_FILES);
    if (files.length === 0) return page('share=none');
    const cache = await caches.open(SHARE_CACHE);
    for (const key of await cache.keys()) await cache.delete(key);
    let n = 0;
    for (const file of files) {
      const key = new URL(`shared/${id}/${n}`, self.registration.scope).href;
      const headers = {
        'content-type': file.type || 'application/octet-stream',
        'x-meshgate-name': encodeURIComponent(file.name || `shared-${n + 1}`),
      };
      await cache.put(key, new Response(file, { headers }));
      n += 1;
    }
    return page(`share=${id}`);
  } catch {
    // Unreadable form or no room left in the browser's storage: the page says the share did not arrive.
    return page('share=failed');
  }
}
