// ESM entry: the same native binding as the CommonJS entry (index.js).
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const native = require('./index.js')

export const {
  Generator,
  ManualClock,
  decode,
  decodeBigInt,
  encode,
  errorCodes,
  layout,
  parseId,
  PublicIds,
} = native
export default native
