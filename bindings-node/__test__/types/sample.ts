// Compiled with `tsc --noEmit -p __test__/types`: the declarations describe
// the API as the tests use it.
import {
  Generator,
  ManualClock,
  decode,
  decodeBigInt,
  encode,
  errorCodes,
  PublicIds,
  type Grant,
  type GrantRequest,
  type LeaseLost,
  type GrantIdEvent,
  eventsInstalled,
  type Stats,
} from 'grantid'

const highWater = new Map<number, number>()

async function source(request: GrantRequest): Promise<Grant> {
  const worker = request.worker ?? 0
  const start = Math.max(highWater.get(worker) ?? 0, request.now, request.notBefore)
  highWater.set(worker, start + request.duration)
  return {
    namespace: request.namespace,
    worker,
    incarnation: request.incarnation,
    grantId: request.requestId,
    start,
    end: start + request.duration,
  }
}

export async function main(): Promise<string[]> {
  const gen: Generator = await Generator.start({
    grantSource: source,
    namespace: 'orders-v1',
    layout: { timestampBits: 41, workerBits: 10, sequenceBits: 12 },
    maxDriftMs: 100,
    startupTimeoutMs: 5000,
    onLeaseLost: (event: LeaseLost) => {
      void event.worker
    },
    clock: new ManualClock(Date.now()),
    onEvent: (e: GrantIdEvent) => {
      const level: 'error' | 'warn' | 'info' | 'debug' | 'trace' = e.level
      void `${level} ${e.event} ${e.message}`
    },
  })
  const fromUrl = await Generator.start({ grantSource: 'file:/tmp/grantid.json', namespace: 'orders-v1' })
  const id: string = gen.nextId()
  const big: bigint = gen.nextIdBigInt()
  const batch: string[] = gen.nextIds(10)
  const later: string[] = await gen.nextIdsAsync(10, 1000)
  const installed: boolean = eventsInstalled()
  void [later, installed]
  const fields = gen.decode(id)
  const ms: number = fields.unixMs + decode(big).timestamp
  const wide: bigint = decodeBigInt(id).sequence
  const stats: Stats = gen.stats()
  const worker: number | null | undefined = stats.worker
  const codes: string[] = errorCodes()
  const encoded: string = encode(1, 2n, 3)
  gen.close()
  fromUrl.close()
  // @ts-expect-error: an ID is never a number
  decode(123)
  const publicIds = new PublicIds(PublicIds.generateKey())
  const slug: string = publicIds.encodeStr(id)
  const back: bigint = publicIds.decodeStrBigInt(slug)
  const numeric: string = publicIds.encode(back)
  // @ts-expect-error: an ID is never a number
  publicIds.encode(5)
  return [id, slug, numeric, String(big), ...batch, String(ms), String(wide), String(worker), ...codes, encoded]
}
