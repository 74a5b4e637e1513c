import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
export const { postgres, redis } = require('./authorities.js')
