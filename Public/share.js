// Files shared to the dashboard (web app share target): registers the service worker (sw.js) and takes the
// files it kept for this page out of the Cache API. See sw.js for the other half.

const SHARE_CACHE = 'meshgate-share';

/** Registers sw.js for this page's folder; only possible in a secure context (HTTPS or localhost). */
export function registerServiceWorker() {
  if (!('serviceWorker' in navigator) || !window.isSecureContext) return;
  navigator.serviceWorker.register('sw.js', { scope: './' }).catch(() => {
    // No worker (private mode, a blocked script): the dashboard works as before, without the share target.
  });
}

/**
 * The files shared to this page load (`?share=<id>` in its address), or null when there was no share; the
 * address loses its `share` parameter. Resolves to {files: File[], problem: string}.
 */
export async function takeSharedFiles() {
  const url = new URL(window.location.href);
  const id = url.searchParams.get('share');
  if (id === null) return null;
  url.searchParams.delete('share');
  window.history.replaceState(null, '', url.href);
  if (id === 'none') return { files: [], problem: 'Nothing to send: only files can be shared with meshgate.' };
  if (id === 'failed' || !('caches' in window)) {
    return { files: [], problem: 'The shared files did not arrive (the browser could not keep them). Share them again.' };
  }
  const files = [];
  try {
    const cache = await caches.open(SHARE_CACHE);
    const prefix = new URL(`shared/${id}/`, document.baseURI).href;
    const keys = (await cache.keys()).filter((request) => request.url.startsWith(prefix));
    keys.sort((a, b) => Number(a.url.slice(prefix.length)) - Number(b.url.slice(prefix.length)));
    for (const key of keys) {
      const response = await cache.match(key);
      if (!response) continue;
      const name = decodeURIComponent(response.headers.get('x-meshgate-name') || 'shared file');
      const type = response.headers.get('content-type') || 'application/octet-stream';
      files.push(new File([await response.blob()], name, { type }));
      await cache.delete(key);
    }
  } catch {
    return { files, problem: 'The shared files could not be read. Share them again.' };
  }
  return { files, problem: files.length === 0 ? 'The shared files are gone (already taken by another tab?). Share them again.' : '' };
}
