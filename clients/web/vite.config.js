// The web chat UI's build: plain React, no source maps, written into the server crate, which
// embeds it (crates/teamster-server/build.rs). Relative URLs let the page work under any path
// prefix. `npm run dev` proxies the API to a local `teamster serve` (TEAMSTER_URL).
import { defineConfig } from 'vite';

export default defineConfig({
  base: './',
  build: {
    outDir: '../../crates/teamster-server/web',
    emptyOutDir: true,
    sourcemap: false,
    modulePreload: { polyfill: false },
    reportCompressedSize: false,
  },
  server: {
    // The page's origin is Vite's: the server would refuse it as cross-origin, so the proxy
    // drops it (the dev server is for development on this machine only).
    proxy: {
      '/api': {
        target: process.env.TEAMSTER_URL ?? 'http://127.0.0.1:8080',
        changeOrigin: true,
        configure: (proxy) => proxy.on('proxyReq', (request) => request.removeHeader('origin')),
      },
    },
  },
});
