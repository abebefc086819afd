import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Integration tests start throwaway Redis servers and a three-node Redis Cluster.
    testTimeout: 20_000,
  },
});
