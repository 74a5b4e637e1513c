import type { Grant, GrantRequest, StoreCallOptions } from './index'

/** What `postgres()` needs of a node-postgres `Pool` or `Client`. */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>
}
/** What `redis()` needs of a node-redis (v4+) client. */
export interface RedisEvaluator {
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>
}
export type GrantSourceFn = (request: GrantRequest) => Promise<Grant>

/** A grant source calling the `grantid.acquire` SQL function. */
export declare function postgres(pool: PgQueryable, options?: StoreCallOptions): GrantSourceFn
/** A grant source running the authority's Lua script. */
export declare function redis(client: RedisEvaluator, options?: StoreCallOptions): GrantSourceFn
