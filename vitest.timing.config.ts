import { defineConfig } from 'vitest/config'
import base from './vitest.config.js'

/** The wall-clock tests (test/timing/), run after the rest of the suite, one file at a time. */
export default defineConfig({
  test: {
    ...base.test,
    include: ['test/timing/**/*.test.ts'],
    exclude: ['**/node_modules/**'],
    maxWorkers: 1,
    minWorkers: 1,
  },
})
