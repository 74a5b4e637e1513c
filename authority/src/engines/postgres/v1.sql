-- grantid PostgreSQL authority, schema version 8 (version 1 plus: forced
-- synchronous_commit, fsync check, 'refused' and 'wait' answers, one
-- worker-choice rule; version 3: state-loss quarantine and bounded lead,
-- docs/AUTHORITIES.md "State loss"; version 4: a renewal during a
-- quarantine is 'lost'; version 5: each namespace records its datacenter
-- split and the largest max_lead_ms and clock_skew_ms it was used with,
-- and a renewal beyond the worker's high-water starts a quarantine;
-- version 6: it does so whoever the store says holds the worker; version 7:
-- only within grantid::evidence_bound, the latest end of a grant the store
-- could have made, and a claim beyond it starts no quarantine; version 8:
-- max_lead_ms and clock_skew_ms are acquire's and fence's arguments). The
-- signatures of version 1's functions are unchanged; grantid.acquire has a
-- 14-argument form (the split) and a 16-argument one (the split, max_lead_ms
-- and clock_skew_ms) beside them. The forms without max_lead_ms and
-- clock_skew_ms take them from the session's settings grantid.max_lead_ms
-- and grantid.clock_skew_ms, or their defaults.
--
-- Applied by `grantid authority init URL`, and by the Rust adapter when the
-- schema is missing. Idempotent: safe to run again. The Rust adapter runs it
-- in one transaction under pg_advisory_xact_lock(hashtext('grantid schema'))
-- so that concurrent first users do not race on CREATE.
--
-- Units: every tick value is ticks of the namespace's layout since its epoch.
-- 64-bit unsigned values (incarnation, request_id) are stored as bigint with
-- the same 64 bits (two's complement): Rust `x as i64`, Python
-- `x - 2**64 if x >= 2**63 else x`.

CREATE SCHEMA IF NOT EXISTS grantid;

CREATE TABLE IF NOT EXISTS grantid.schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A namespace and the layout it was registered with.
CREATE TABLE IF NOT EXISTS grantid.namespaces (
    namespace      text PRIMARY KEY,
    timestamp_bits integer NOT NULL,
    worker_bits    integer NOT NULL,
    sequence_bits  integer NOT NULL,
    epoch_ms       bigint  NOT NULL,
    tick_ms        bigint  NOT NULL,
    -- Workers [0, next_unused) have been handed out at least once.
    next_unused    bigint  NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- Version 5. split_bits: the datacenter bits of the split whose one
-- datacenter's workers the namespace numbers (worker_bits is then the
-- per-datacenter width); 0 for whole worker values. max_lead_ms and
-- clock_skew_ms: the largest every caller used on the namespace, raised by
-- each grant, never lowered; a quarantine lasts at least that long for it.
ALTER TABLE grantid.namespaces ADD COLUMN IF NOT EXISTS split_bits integer NOT NULL DEFAULT 0;
ALTER TABLE grantid.namespaces ADD COLUMN IF NOT EXISTS max_lead_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE grantid.namespaces ADD COLUMN IF NOT EXISTS clock_skew_ms bigint NOT NULL DEFAULT 0;

-- One row per (namespace, worker) ever used: the lease and the high-water.
CREATE TABLE IF NOT EXISTS grantid.workers (
    namespace    text    NOT NULL REFERENCES grantid.namespaces (namespace),
    worker       bigint  NOT NULL,
    holder       bigint,                      -- incarnation; NULL once released
    lease_expiry bigint  NOT NULL DEFAULT 0,  -- ticks
    high_water   bigint  NOT NULL DEFAULT 0,  -- ticks: end of every grant ever made
    fencing      bigint  NOT NULL DEFAULT 0,  -- grant_id of the last grant; +1 per grant
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (namespace, worker)
);
CREATE INDEX IF NOT EXISTS workers_recycle
    ON grantid.workers (namespace, (holder IS NOT NULL), lease_expiry);

-- Every grant ever made, in the transaction that made it. Also the record
-- that answers a retry of the same (namespace, incarnation, request_id).
CREATE TABLE IF NOT EXISTS grantid.grant_log (
    namespace   text   NOT NULL,
    worker      bigint NOT NULL,
    incarnation bigint NOT NULL,
    request_id  bigint NOT NULL,
    grant_id    bigint NOT NULL,  -- the worker's fencing epoch
    start_tick  bigint NOT NULL,  -- first tick (inclusive)
    end_tick    bigint NOT NULL,  -- first tick after the interval (exclusive)
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (namespace, incarnation, request_id)
);
CREATE INDEX IF NOT EXISTS grant_log_worker
    ON grantid.grant_log (namespace, worker, start_tick);

-- State loss (docs/AUTHORITIES.md, "State loss"): one row for the whole
-- database. It records the database's identity (system identifier, when the
-- role may read it, and the WAL timeline, which a promotion or a
-- point-in-time recovery changes) and a quarantine: no grant before
-- quarantine_until_ms (Unix ms). A missing row (never used, or lost: they
-- look the same) or another identity starts a quarantine of max_lead +
-- clock skew: the namespace's recorded ones for a grantid.acquire (at
-- least the caller's), the arguments of grantid.fence; the forms without
-- them take the session's settings grantid.max_lead_ms (default 7000) and
-- grantid.clock_skew_ms (default 1000).
CREATE TABLE IF NOT EXISTS grantid.store (
    id                  boolean PRIMARY KEY DEFAULT true CHECK (id),
    system_identifier   text,
    timeline            integer,
    epoch               bigint  NOT NULL DEFAULT 1,
    quarantine_until_ms bigint  NOT NULL DEFAULT 0,
    reason              text,
    updated_at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- Version 5: when the latest quarantine started (Unix ms); a namespace
-- used with a longer lead than the caller that started it waits until
-- quarantine_since_ms + its recorded max_lead_ms + clock_skew_ms.
ALTER TABLE grantid.store ADD COLUMN IF NOT EXISTS quarantine_since_ms bigint NOT NULL DEFAULT 0;

CREATE OR REPLACE FUNCTION grantid.setting_ms(p_name text, p_default bigint) RETURNS bigint
LANGUAGE sql STABLE AS $fn$
    SELECT coalesce(nullif(current_setting(p_name, true), '')::bigint, p_default);
$fn$;

-- The database's identity: system identifier (NULL when this role may not
-- read pg_control_system()) and current WAL timeline.
CREATE OR REPLACE FUNCTION grantid.identity(OUT system_identifier text, OUT timeline integer)
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    BEGIN
        SELECT c.system_identifier::text INTO system_identifier FROM pg_control_system() c;
    EXCEPTION WHEN insufficient_privilege THEN
        system_identifier := NULL;
    END;
    timeline := ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer;
END
$fn$;

-- Starts (or extends) a quarantine until p_ms + p_lead_ms + p_skew_ms, and
-- at least until p_latest_ms + p_skew_ms (a holder's evidence: the end of
-- grants it holds); a NULL lead or skew is the session's setting. Each
-- namespace waits at least its own recorded lead from p_ms (grantid.gate).
-- Returns the end for the longest recorded lead.
DROP FUNCTION IF EXISTS grantid.quarantine(bigint, text);
CREATE OR REPLACE FUNCTION grantid.quarantine_for(p_ms bigint, p_reason text,
                                                  p_latest_ms bigint, p_lead_ms bigint,
                                                  p_skew_ms bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_skew  bigint := coalesce(p_skew_ms, grantid.setting_ms('grantid.clock_skew_ms', 1000));
    v_until bigint := greatest(p_ms + coalesce(p_lead_ms,
                                               grantid.setting_ms('grantid.max_lead_ms', 7000)),
                               p_latest_ms) + v_skew;
    v_id    record := grantid.identity();
BEGIN
    INSERT INTO grantid.store (system_identifier, timeline, quarantine_until_ms, reason,
                               quarantine_since_ms)
    VALUES (v_id.system_identifier, v_id.timeline, v_until, p_reason, p_ms)
    ON CONFLICT (id) DO UPDATE
       SET epoch = grantid.store.epoch + 1,
           quarantine_until_ms = greatest(grantid.store.quarantine_until_ms, v_until),
           quarantine_since_ms = greatest(grantid.store.quarantine_since_ms, p_ms),
           system_identifier = v_id.system_identifier, timeline = v_id.timeline,
           reason = p_reason, updated_at = clock_timestamp();
    RETURN (SELECT greatest(s.quarantine_until_ms,
                            s.quarantine_since_ms + coalesce(max(n.max_lead_ms + n.clock_skew_ms), 0))
              FROM grantid.store s LEFT JOIN grantid.namespaces n ON true
             GROUP BY s.quarantine_until_ms, s.quarantine_since_ms);
END
$fn$;

-- Version 3's form: lead and skew from the session's settings.
CREATE OR REPLACE FUNCTION grantid.quarantine(p_ms bigint, p_reason text,
                                              p_latest_ms bigint DEFAULT 0) RETURNS bigint
LANGUAGE sql VOLATILE AS $fn$
    SELECT grantid.quarantine_for(p_ms, p_reason, p_latest_ms, NULL, NULL);
$fn$;

-- NULL when grants may be made at p_ms for a namespace used with leads up
-- to p_lead_ms and skews up to p_skew_ms; else why not (a quarantine).
DROP FUNCTION IF EXISTS grantid.gate(bigint);
CREATE OR REPLACE FUNCTION grantid.gate(p_ms bigint, p_lead_ms bigint DEFAULT 0,
                                        p_skew_ms bigint DEFAULT 0) RETURNS text
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    st      grantid.store%ROWTYPE;
    v_id    record := grantid.identity();
    v_until bigint;
    -- A lead of 0 is none given (a call without them): the quarantine this
    -- starts takes the session's settings, as version 7 did.
    v_lead  bigint := nullif(p_lead_ms, 0);
    v_skew  bigint := CASE WHEN p_lead_ms > 0 THEN p_skew_ms END;
BEGIN
    SELECT * INTO st FROM grantid.store;
    IF NOT FOUND THEN
        PERFORM grantid.quarantine_for(p_ms,
            'the database had no grantid state (never used, or lost)', 0, v_lead, v_skew);
    ELSIF st.timeline IS DISTINCT FROM v_id.timeline
       OR (st.system_identifier IS NOT NULL AND v_id.system_identifier IS NOT NULL
           AND st.system_identifier <> v_id.system_identifier) THEN
        PERFORM grantid.quarantine_for(p_ms, format(
            'the database''s identity changed from system %s timeline %s to system %s '
            'timeline %s (a promotion, a point-in-time recovery or a restore)',
            coalesce(st.system_identifier, '?'), st.timeline,
            coalesce(v_id.system_identifier, '?'), v_id.timeline), 0, v_lead, v_skew);
    END IF;
    SELECT * INTO st FROM grantid.store;
    v_until := greatest(st.quarantine_until_ms,
                        CASE WHEN st.quarantine_since_ms > 0
                             THEN st.quarantine_since_ms + p_lead_ms + p_skew_ms ELSE 0 END);
    IF p_ms < v_until THEN
        RETURN format('quarantine: %s; no grant before Unix ms %s (%s ms from now), when '
                      'every interval granted before it has ended', st.reason,
                      v_until, v_until - p_ms);
    END IF;
    RETURN NULL;
END
$fn$;

-- The operator's fence (grantid authority fence): a quarantine from now
-- (p_now_ms NULL: the database's clock) of p_max_lead_ms + p_clock_skew_ms.
CREATE OR REPLACE FUNCTION grantid.fence(p_now_ms bigint, p_max_lead_ms bigint,
                                         p_clock_skew_ms bigint) RETURNS bigint
LANGUAGE sql VOLATILE AS $fn$
    SELECT grantid.quarantine_for(coalesce(p_now_ms,
        floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 'fenced by the operator',
        0, p_max_lead_ms, p_clock_skew_ms);
$fn$;

-- Version 1's form: lead and skew from the session's settings.
CREATE OR REPLACE FUNCTION grantid.fence(p_now_ms bigint DEFAULT NULL) RETURNS bigint
LANGUAGE sql VOLATILE AS $fn$
    SELECT grantid.fence(p_now_ms, grantid.setting_ms('grantid.max_lead_ms', 7000),
                         grantid.setting_ms('grantid.clock_skew_ms', 1000));
$fn$;

-- grantid authority init --new-deployment: the row without a quarantine,
-- if there is none yet. True if created.
CREATE OR REPLACE FUNCTION grantid.declare_new_deployment() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_id record := grantid.identity();
BEGIN
    INSERT INTO grantid.store (system_identifier, timeline, quarantine_until_ms, reason)
    VALUES (v_id.system_identifier, v_id.timeline, 0, 'new deployment (operator)')
    ON CONFLICT (id) DO NOTHING;
    RETURN FOUND;
END
$fn$;

-- The allocation rule (docs/DESIGN.md section 2), in one transaction: the caller's
-- statement. Returns one row: status 'granted' (worker, grant_id,
-- start_tick, end_tick), or 'lost' (someone else holds the worker, or none
-- is free), 'refused' (can never succeed as asked: another layout, a worker
-- out of range, a server without fsync) or 'wait' (every free worker's
-- high-water is ahead of the clock: retry), with the message saying why.
-- The transaction commits with synchronous_commit at least 'on', whatever
-- the database, role or session default: a grant acknowledged before its
-- WAL is flushed could vanish in a crash and be granted again.
-- p_worker NULL asks for any free worker. p_lease_grace is in ticks.
-- p_now_ms replaces the database clock (Unix ms): for tests and fault
-- injection only; NULL in production.
-- p_split_bits: the layout's split (grantid.namespaces.split_bits).
-- p_max_lead_ms: no grant ends more than this after the clock; with
-- p_clock_skew_ms, the length of a quarantine this call starts. The 14- and
-- 13-argument forms below are this one with the session's settings (and a
-- split of 0).
CREATE OR REPLACE FUNCTION grantid.acquire(
    p_namespace      text,
    p_incarnation    bigint,
    p_request_id     bigint,
    p_worker         bigint,
    p_not_before     bigint,
    p_duration       bigint,
    p_timestamp_bits integer,
    p_worker_bits    integer,
    p_sequence_bits  integer,
    p_epoch_ms       bigint,
    p_tick_ms        bigint,
    p_lease_grace    bigint,
    p_now_ms         bigint,
    p_split_bits     integer,
    p_max_lead_ms    bigint,
    p_clock_skew_ms  bigint
) RETURNS TABLE (status text, worker bigint, grant_id bigint,
                 start_tick bigint, end_tick bigint, message text)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    ns       grantid.namespaces%ROWTYPE;
    w        grantid.workers%ROWTYPE;
    logged   grantid.grant_log%ROWTYPE;
    v_limit  bigint;
    v_count  bigint;
    v_now    bigint;
    v_start  bigint;
    v_end    bigint;
    v_fence  bigint;
    v_cand   bigint;
    v_bound  bigint;
    v_gate   text;
    v_ms     bigint;
    v_lead   bigint := p_max_lead_ms;
    v_skew   bigint := p_clock_skew_ms;
BEGIN
    IF p_timestamp_bits < 1 OR p_timestamp_bits > 62 OR p_worker_bits < 0
       OR p_worker_bits > 32 OR p_tick_ms < 1 OR p_duration < 1
       OR p_split_bits IS NULL OR p_split_bits < 0 OR p_split_bits > 32 THEN
        RAISE EXCEPTION 'grantid.acquire: bad layout or duration';
    END IF;
    IF v_lead IS NULL OR v_lead < 1 OR v_skew IS NULL OR v_skew < 0 THEN
        RAISE EXCEPTION 'grantid.acquire: max_lead_ms must be at least 1 and clock_skew_ms at least 0';
    END IF;
    v_limit := 1::bigint << p_timestamp_bits;
    v_count := 1::bigint << p_worker_bits;

    -- Durability of this transaction's commit (it decides at commit time).
    IF current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
    IF current_setting('fsync') <> 'on' THEN
        RETURN QUERY SELECT 'refused'::text, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, 'the server runs with fsync = off: no grant would survive a crash'::text;
        RETURN;
    END IF;

    -- A retry gets the recorded grant.
    SELECT * INTO logged FROM grantid.grant_log l
     WHERE l.namespace = p_namespace AND l.incarnation = p_incarnation
       AND l.request_id = p_request_id;
    IF FOUND THEN
        RETURN QUERY SELECT 'granted'::text, logged.worker, logged.grant_id,
                            logged.start_tick, logged.end_tick, 'retry'::text;
        RETURN;
    END IF;

    -- The namespace, registered with its layout on first use. A concurrent
    -- first insert waits on the primary key, then does nothing; the SELECT
    -- (a fresh snapshot) then sees the winner's row.
    INSERT INTO grantid.namespaces
        (namespace, timestamp_bits, worker_bits, sequence_bits, epoch_ms, tick_ms, split_bits)
    VALUES (p_namespace, p_timestamp_bits, p_worker_bits, p_sequence_bits,
            p_epoch_ms, p_tick_ms, p_split_bits)
    ON CONFLICT (namespace) DO NOTHING;
    IF p_worker IS NULL THEN
        -- Handing out a new worker is serialised per namespace.
        SELECT * INTO ns FROM grantid.namespaces n
         WHERE n.namespace = p_namespace FOR NO KEY UPDATE;
    ELSE
        SELECT * INTO ns FROM grantid.namespaces n WHERE n.namespace = p_namespace;
    END IF;
    IF (ns.timestamp_bits, ns.worker_bits, ns.sequence_bits, ns.epoch_ms, ns.tick_ms,
        ns.split_bits)
       IS DISTINCT FROM
       (p_timestamp_bits, p_worker_bits, p_sequence_bits, p_epoch_ms, p_tick_ms,
        p_split_bits) THEN
        RETURN QUERY SELECT 'refused'::text, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, format('namespace %L is registered with another layout '
                '(%s/%s/%s bits, epoch %s ms, tick %s ms, datacenter split %s bits)',
                p_namespace, ns.timestamp_bits, ns.worker_bits, ns.sequence_bits,
                ns.epoch_ms, ns.tick_ms, ns.split_bits);
        RETURN;
    END IF;
    -- The longest lead and skew any caller used on the namespace, raised
    -- before this caller's grant can exist.
    IF ns.max_lead_ms < v_lead OR ns.clock_skew_ms < v_skew THEN
        UPDATE grantid.namespaces n
           SET max_lead_ms = greatest(n.max_lead_ms, v_lead),
               clock_skew_ms = greatest(n.clock_skew_ms, v_skew)
         WHERE n.namespace = p_namespace
        RETURNING * INTO ns;
    END IF;

    -- Authority time: the database's clock, in ticks of the layout.
    v_ms := coalesce(p_now_ms, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    v_now := greatest(v_ms - p_epoch_ms, 0) / p_tick_ms;

    -- State loss: nothing is granted while the database is quarantined.
    v_gate := grantid.gate(v_ms, ns.max_lead_ms, ns.clock_skew_ms);
    IF v_gate IS NOT NULL AND p_worker IS NOT NULL THEN
        -- A renewal: the worker's earlier grants were made before what
        -- started the quarantine (a loss, a restore, a fence), by a history
        -- that may no longer exist. Its generator stops issuing from them
        -- now and asks for a new worker, which waits out the quarantine.
        RETURN QUERY SELECT 'lost'::text, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, format('worker %s: %s; the grants it holds came from before it: '
                'stop issuing from them and acquire again', p_worker, v_gate);
        RETURN;
    END IF;
    IF v_gate IS NOT NULL THEN
        RETURN QUERY SELECT 'wait'::text, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, v_gate;
        RETURN;
    END IF;

    IF p_worker IS NOT NULL THEN
        IF p_worker < 0 OR p_worker >= v_count THEN
            RETURN QUERY SELECT 'refused'::text, NULL::bigint, NULL::bigint, NULL::bigint,
                NULL::bigint, format('worker %s is outside the namespace''s %s workers',
                                     p_worker, v_count);
            RETURN;
        END IF;
        INSERT INTO grantid.workers (namespace, worker) VALUES (p_namespace, p_worker)
        ON CONFLICT (namespace, worker) DO NOTHING;
        SELECT * INTO w FROM grantid.workers x
         WHERE x.namespace = p_namespace AND x.worker = p_worker FOR UPDATE;
        -- The forgotten-grant check (grantid::forgotten_grant), before the
        -- holder's: the holder's grants end beyond the worker's high-water,
        -- so the database lost a grant it made (a restore its identity does
        -- not show), whoever the database says holds the worker now.
        IF p_not_before > w.high_water THEN
            -- Evidence only within the latest end any grant of the store
            -- can have (grantid::evidence_bound): beyond it, no holder
            -- could send it, and nothing starts.
            v_bound := v_now + (ns.max_lead_ms + ns.clock_skew_ms + p_tick_ms - 1) / p_tick_ms;
            IF p_not_before > v_bound THEN
                RETURN QUERY SELECT 'lost'::text, NULL::bigint, NULL::bigint, NULL::bigint,
                    NULL::bigint, format('worker %s: a renewal from tick %s is not evidence of '
                    'a lost grant: it is beyond any grant the store could have made (tick %s: '
                    'the authority''s clock plus max_lead_ms and clock_skew_ms); no quarantine '
                    'starts, and no grant is made', p_worker, p_not_before, v_bound);
                RETURN;
            END IF;
            v_gate := format('worker %s: its holder holds grants until tick %s, beyond the '
                'store''s high-water (tick %s): the store forgot a grant it made (restored '
                'from a backup or a snapshot?); stop issuing from them and acquire again',
                p_worker, p_not_before, w.high_water);
            PERFORM grantid.quarantine_for(v_ms, v_gate, p_epoch_ms + p_not_before * p_tick_ms,
                                           ns.max_lead_ms, ns.clock_skew_ms);
            RETURN QUERY SELECT 'lost'::text, NULL::bigint, NULL::bigint, NULL::bigint,
                NULL::bigint, v_gate;
            RETURN;
        END IF;
        IF w.holder IS NOT NULL AND w.holder <> p_incarnation AND w.lease_expiry > v_now THEN
            RETURN QUERY SELECT 'lost'::text, NULL::bigint, NULL::bigint, NULL::bigint,
                NULL::bigint, format('worker %s is held by incarnation %s until tick %s',
                                     p_worker, w.holder, w.lease_expiry);
            RETURN;
        END IF;
    ELSE
        -- Never-used workers first.
        WHILE w.worker IS NULL AND ns.next_unused < v_count LOOP
            v_cand := ns.next_unused;
            ns.next_unused := ns.next_unused + 1;
            INSERT INTO grantid.workers (namespace, worker) VALUES (p_namespace, v_cand)
            ON CONFLICT (namespace, worker) DO NOTHING;
            SELECT * INTO w FROM grantid.workers x
             WHERE x.namespace = p_namespace AND x.worker = v_cand FOR UPDATE;
            IF w.fencing <> 0 OR w.holder IS NOT NULL THEN
                w := NULL;  -- already used through an explicit request
            END IF;
        END LOOP;
        UPDATE grantid.namespaces n SET next_unused = ns.next_unused
         WHERE n.namespace = p_namespace;
        -- Then the one rule of docs/AUTHORITIES.md ("Which worker"): usable
        -- now (high-water not after the clock) first, else the nearest
        -- high-water; released before expired; the longest released or
        -- expired; the lowest number.
        IF w.worker IS NULL THEN
            SELECT * INTO w FROM grantid.workers x
             WHERE x.namespace = p_namespace AND x.worker < v_count
               AND (x.holder IS NULL OR x.lease_expiry <= v_now)
             ORDER BY (x.high_water > v_now),
                      CASE WHEN x.high_water > v_now THEN x.high_water ELSE 0 END,
                      (x.holder IS NOT NULL), x.lease_expiry, x.worker
             LIMIT 1 FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                RETURN QUERY SELECT 'lost'::text, NULL::bigint, NULL::bigint,
                    NULL::bigint, NULL::bigint,
                    format('no free worker among the namespace''s %s workers', v_count);
                RETURN;
            END IF;
            -- A first grant starts at most 100 ms ahead of the clock (the
            -- generator's default max_wait): further ahead, retry later.
            IF w.high_water > v_now + (100 + p_tick_ms - 1) / p_tick_ms THEN
                RETURN QUERY SELECT 'wait'::text, NULL::bigint, NULL::bigint,
                    NULL::bigint, NULL::bigint,
                    format('every free worker''s high-water is ahead of the clock: the '
                           'nearest, worker %s, by %s ticks; a first grant waits for it',
                           w.worker, w.high_water - v_now);
                RETURN;
            END IF;
        END IF;
    END IF;

    -- The grant: after every interval ever granted for the worker.
    v_start := greatest(w.high_water, v_now, p_not_before);
    IF v_start >= v_limit THEN
        v_end := v_start;
    ELSIF p_duration >= v_limit - v_start THEN
        v_end := v_limit;
    ELSE
        v_end := v_start + p_duration;
    END IF;
    IF v_start >= v_end THEN
        RETURN QUERY SELECT 'lost'::text, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, format('worker %s has no timestamp space left (high-water %s)',
                                 w.worker, w.high_water);
        RETURN;
    END IF;
    -- The bounded lead: no grant ends more than max_lead after the clock.
    v_end := least(v_end, v_now + v_lead / p_tick_ms);
    IF v_start >= v_end THEN
        RETURN QUERY SELECT 'wait'::text, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, format('worker %s: a grant from tick %s would end more than '
                'max_lead (%s ms) after the clock', w.worker, v_start, v_lead);
        RETURN;
    END IF;
    UPDATE grantid.workers x
       SET holder = p_incarnation, lease_expiry = v_end + p_lease_grace,
           high_water = v_end, fencing = x.fencing + 1, updated_at = clock_timestamp()
     WHERE x.namespace = p_namespace AND x.worker = w.worker
    RETURNING x.fencing INTO v_fence;
    INSERT INTO grantid.grant_log
        (namespace, worker, incarnation, request_id, grant_id, start_tick, end_tick)
    VALUES (p_namespace, w.worker, p_incarnation, p_request_id, v_fence, v_start, v_end);
    RETURN QUERY SELECT 'granted'::text, w.worker, v_fence, v_start, v_end, NULL::text;
END
$fn$;

-- Version 5's form: lead and skew from the session's settings.
CREATE OR REPLACE FUNCTION grantid.acquire(
    p_namespace      text,
    p_incarnation    bigint,
    p_request_id     bigint,
    p_worker         bigint,
    p_not_before     bigint,
    p_duration       bigint,
    p_timestamp_bits integer,
    p_worker_bits    integer,
    p_sequence_bits  integer,
    p_epoch_ms       bigint,
    p_tick_ms        bigint,
    p_lease_grace    bigint,
    p_now_ms         bigint,
    p_split_bits     integer
) RETURNS TABLE (status text, worker bigint, grant_id bigint,
                 start_tick bigint, end_tick bigint, message text)
LANGUAGE sql VOLATILE AS $fn$
    SELECT * FROM grantid.acquire(p_namespace, p_incarnation, p_request_id, p_worker,
        p_not_before, p_duration, p_timestamp_bits, p_worker_bits, p_sequence_bits,
        p_epoch_ms, p_tick_ms, p_lease_grace, p_now_ms, p_split_bits,
        grantid.setting_ms('grantid.max_lead_ms', 7000),
        grantid.setting_ms('grantid.clock_skew_ms', 1000));
$fn$;

-- Version 1's form: the 13-argument one with no datacenter split.
CREATE OR REPLACE FUNCTION grantid.acquire(
    p_namespace      text,
    p_incarnation    bigint,
    p_request_id     bigint,
    p_worker         bigint,
    p_not_before     bigint,
    p_duration       bigint,
    p_timestamp_bits integer,
    p_worker_bits    integer,
    p_sequence_bits  integer,
    p_epoch_ms       bigint,
    p_tick_ms        bigint,
    p_lease_grace    bigint,
    p_now_ms         bigint DEFAULT NULL
) RETURNS TABLE (status text, worker bigint, grant_id bigint,
                 start_tick bigint, end_tick bigint, message text)
LANGUAGE sql VOLATILE AS $fn$
    SELECT * FROM grantid.acquire(p_namespace, p_incarnation, p_request_id, p_worker,
        p_not_before, p_duration, p_timestamp_bits, p_worker_bits, p_sequence_bits,
        p_epoch_ms, p_tick_ms, p_lease_grace, p_now_ms, 0);
$fn$;

-- Ends the lease of a worker if p_incarnation holds it; the high-water stays.
CREATE OR REPLACE FUNCTION grantid.release(
    p_namespace text, p_worker bigint, p_incarnation bigint, p_now_ms bigint DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    ns grantid.namespaces%ROWTYPE;
    v_now bigint;
BEGIN
    SELECT * INTO ns FROM grantid.namespaces n WHERE n.namespace = p_namespace;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_now := greatest(coalesce(p_now_ms,
                 floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                 - ns.epoch_ms, 0) / ns.tick_ms;
    UPDATE grantid.workers x
       SET holder = NULL, lease_expiry = least(x.lease_expiry, v_now),
           updated_at = clock_timestamp()
     WHERE x.namespace = p_namespace AND x.worker = p_worker
       AND x.holder = p_incarnation;
    RETURN FOUND;
END
$fn$;

-- Deletes grant-log rows older than p_age (the high-water marks live in
-- grantid.workers; only retries of requests that old lose their answer).
CREATE OR REPLACE FUNCTION grantid.prune_grant_log(p_age interval) RETURNS bigint
LANGUAGE sql VOLATILE AS $fn$
    WITH d AS (DELETE FROM grantid.grant_log WHERE created_at < clock_timestamp() - p_age
               RETURNING 1)
    SELECT count(*) FROM d;
$fn$;

INSERT INTO grantid.schema_version (version) VALUES (1), (2), (3), (4), (5), (6), (7), (8) ON CONFLICT DO NOTHING;
