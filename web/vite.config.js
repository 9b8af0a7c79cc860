import { defineConfig } from 'vite';

// The build goes to web/dist (gitignored), which api/web.py serves at `/`.
export default defineConfig({
  build: { outDir: 'dist', emptyOutDir: true, chunkSizeWarningLimit: 2000 },
  server: { proxy: { '/api': 'http://127.0.0.1:8000' } },
});
