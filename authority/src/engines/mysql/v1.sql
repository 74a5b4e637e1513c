-- grantid MySQL / MariaDB authority, schema version 5 (version 1; version 2:
-- each namespace records its datacenter split and the largest max_lead_ms
-- and clock_skew_ms it was used with, and a renewal beyond the worker's
-- high-water starts a quarantine; version 3: the server's identity is
-- server_id plus MySQL's server_uuid, no longer MariaDB's server_uid, a
-- hash of the host's MAC address that changes when a container restarts,
-- and a multi-primary server (a Galera node, a Group Replication group in
-- multi-primary mode) is refused; version 4: a renewal beyond the worker's
-- high-water quarantines whoever the store says holds the worker; version 5:
-- only within grantid::evidence_bound, the latest end of a grant the store
-- could have made, and a claim beyond it starts no quarantine): the
-- allocation rule
-- of docs/DESIGN.md section 2, the same as grantid.acquire in v1.sql
-- (PostgreSQL) and authority/src/engines/redis/v1.lua (Redis), as stored procedures on
-- InnoDB tables of the URL's database (prefix grantid_).
--
-- Applied by `grantid authority init mysql://...`, and by the Rust adapter
-- when grantid_schema_version lacks version 4, under GET_LOCK('grantid
-- schema'). Idempotent: safe to run again. A MariaDB database upgraded
-- from version 1 or 2 records the old identity (with server_uid): its
-- first grant after the upgrade quarantines it once. It is also a script
-- for the mariadb / mysql command-line client (hence the DELIMITER lines,
-- which the adapter understands too):
--   mariadb -h HOST -u USER DB < authority/src/engines/mysql/v1.sql
-- Tested on MariaDB 10.11 (and a one-node Galera cluster); written for
-- MySQL 8 as well (variables only one of them has are read through
-- prepared statements: grantid_identity, grantid_multi_primary).
--
-- Units: every tick value is ticks of the namespace's layout since its epoch.
-- Incarnations and request ids are BIGINT UNSIGNED (the generator's u64).
-- Authority time is the server's UTC clock (UTC_TIMESTAMP(6), independent
-- of the session's time zone), in Unix ms. Namespace parameters are ASCII
-- with the columns' binary collation: compared byte for byte, and through
-- the primary keys (declared in the database's default character set, the
-- parameters were converted in each comparison and the grant-log lookup
-- scanned the table: 506 and 772 against 927 and 2,304 grants/s at 8
-- clients, measured back to back).

CREATE TABLE IF NOT EXISTS grantid_schema_version (
    version    INT PRIMARY KEY,
    applied_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB;

-- A namespace and the layout it was registered with. Namespaces are ASCII
-- (grantid::check_namespace), compared byte for byte (ascii_bin).
CREATE TABLE IF NOT EXISTS grantid_namespaces (
    namespace      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY,
    timestamp_bits INT    NOT NULL,
    worker_bits    INT    NOT NULL,
    sequence_bits  INT    NOT NULL,
    epoch_ms       BIGINT NOT NULL,
    tick_ms        BIGINT NOT NULL,
    -- Workers [0, next_unused) have been handed out at least once.
    next_unused    BIGINT NOT NULL DEFAULT 0,
    created_at     DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB;

-- One row per (namespace, worker) ever used: the lease and the high-water.
CREATE TABLE IF NOT EXISTS grantid_workers (
    namespace    VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    worker       BIGINT NOT NULL,
    holder       BIGINT UNSIGNED NULL,      -- incarnation; NULL once released
    lease_expiry BIGINT NOT NULL DEFAULT 0, -- ticks
    high_water   BIGINT NOT NULL DEFAULT 0, -- ticks: end of every grant ever made
    fencing      BIGINT NOT NULL DEFAULT 0, -- grant_id of the last grant; +1 per grant
    updated_at   DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (namespace, worker)
) ENGINE=InnoDB;

-- Every grant ever made, in the transaction that made it. Also the record
-- that answers a retry of the same (namespace, incarnation, request_id).
CREATE TABLE IF NOT EXISTS grantid_grant_log (
    namespace   VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    worker      BIGINT NOT NULL,
    incarnation BIGINT UNSIGNED NOT NULL,
    request_id  BIGINT UNSIGNED NOT NULL,
    grant_id    BIGINT NOT NULL,  -- the worker's fencing epoch
    start_tick  BIGINT NOT NULL,  -- first tick (inclusive)
    end_tick    BIGINT NOT NULL,  -- first tick after the interval (exclusive)
    created_at  DATETIME(3) NOT NULL, -- UTC
    PRIMARY KEY (namespace, incarnation, request_id),
    KEY grant_log_worker (namespace, worker, start_tick),
    KEY grant_log_created (created_at)
) ENGINE=InnoDB;

-- State loss (docs/AUTHORITIES.md and docs/reference/mysql.md, "State loss"):
-- one row for the whole database. It records the server's identity
-- (grantid_identity below) and a quarantine: no grant before
-- quarantine_until_ms (Unix ms). A missing row (never used, or lost: they
-- look the same) or another identity starts a quarantine of max_lead +
-- clock skew.
CREATE TABLE IF NOT EXISTS grantid_store (
    id                  TINYINT PRIMARY KEY,
    identity            VARCHAR(255) NULL,
    epoch               BIGINT NOT NULL DEFAULT 1,
    quarantine_until_ms BIGINT NOT NULL DEFAULT 0,
    reason              VARCHAR(512) NULL,
    updated_at          DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB;

DELIMITER //
-- Adds a column unless the table has it (MySQL 8 has no ADD COLUMN IF NOT
-- EXISTS).
DROP PROCEDURE IF EXISTS grantid_add_column //
CREATE PROCEDURE grantid_add_column(IN p_table VARCHAR(64), IN p_column VARCHAR(64),
                                    IN p_definition VARCHAR(255))
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                    WHERE table_schema = DATABASE() AND table_name = p_table
                      AND column_name = p_column) THEN
        SET @grantid_ddl = CONCAT('ALTER TABLE ', p_table, ' ADD COLUMN ', p_column, ' ',
                                  p_definition);
        PREPARE grantid_s FROM @grantid_ddl;
        EXECUTE grantid_s;
        DEALLOCATE PREPARE grantid_s;
    END IF;
END //
-- Version 2. split_bits: the datacenter bits of the split whose one
-- datacenter's workers the namespace numbers (worker_bits is then the
-- per-datacenter width); 0 for whole worker values. max_lead_ms and
-- clock_skew_ms: the largest every caller used on the namespace, raised by
-- each grant, never lowered. quarantine_since_ms: when the latest
-- quarantine started; a namespace waits at least its recorded lead and
-- skew from it.
CALL grantid_add_column('grantid_namespaces', 'split_bits', 'INT NOT NULL DEFAULT 0') //
CALL grantid_add_column('grantid_namespaces', 'max_lead_ms', 'BIGINT NOT NULL DEFAULT 0') //
CALL grantid_add_column('grantid_namespaces', 'clock_skew_ms', 'BIGINT NOT NULL DEFAULT 0') //
CALL grantid_add_column('grantid_store', 'quarantine_since_ms', 'BIGINT NOT NULL DEFAULT 0') //
DROP FUNCTION IF EXISTS grantid_now_ms //
CREATE FUNCTION grantid_now_ms() RETURNS BIGINT NOT DETERMINISTIC NO SQL
    RETURN TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 //

-- The server's identity: server_id (the global value: MariaDB lets a
-- session set its own; replication requires every server of a topology
-- to have its own), and on MySQL server_uuid (auto.cnf of the
-- data directory: the same after a restart, new in a new data directory).
-- MariaDB's server_uid is left out: a hash of the host's MAC address and
-- the port, it changes when a container restarts with a new MAC address,
-- which would quarantine every such restart. A failover to a replica
-- changes the identity; a restart does not. Not seen: a copy of the data
-- on a server with the same server_id (and, on MariaDB, no uuid): the
-- forgotten-grant check and `grantid authority fence` cover it.
DROP PROCEDURE IF EXISTS grantid_identity //
CREATE PROCEDURE grantid_identity(OUT p_identity VARCHAR(255))
BEGIN
    DECLARE v_missing BOOLEAN DEFAULT FALSE;
    -- ER_UNKNOWN_SYSTEM_VARIABLE: MariaDB has no server_uuid.
    DECLARE CONTINUE HANDLER FOR 1193 SET v_missing = TRUE;
    SET @grantid_uuid = NULL;
    PREPARE grantid_s FROM 'SELECT @@server_uuid INTO @grantid_uuid';
    IF NOT v_missing THEN
        EXECUTE grantid_s;
        DEALLOCATE PREPARE grantid_s;
    END IF;
    SET p_identity = CONCAT_WS(' ', CONCAT('server_id=', @@GLOBAL.server_id),
        CONCAT('server_uuid=', @grantid_uuid));
END //

-- Multi-primary setups, refused by grantid_acquire and `grantid authority
-- init`: several servers take writes at once, each with its own identity
-- (the quarantine would flap as calls land on different nodes), and a row
-- lock taken on one does not hold on the others. p_why is NULL, or says
-- what the server is and what to change. Read through prepared
-- statements: a server without the variable (built without wsrep, no
-- group replication plugin) has not the setup; any other error reaches
-- the caller (no grant).
-- * Galera (MariaDB Galera Cluster, Percona XtraDB Cluster): wsrep_on = ON.
-- * MySQL Group Replication in multi-primary mode:
--   group_replication_single_primary_mode = OFF, unless this member is
--   OFFLINE (group replication stopped).
-- A single primary with asynchronous (or semi-synchronous) replicas, and
-- Group Replication in single-primary mode, are allowed: a failover
-- changes the identity and quarantines once.
DROP PROCEDURE IF EXISTS grantid_multi_primary //
CREATE PROCEDURE grantid_multi_primary(OUT p_why VARCHAR(1024))
BEGIN
    DECLARE v_missing BOOLEAN DEFAULT FALSE;
    DECLARE CONTINUE HANDLER FOR 1193 SET v_missing = TRUE;
    SET p_why = NULL, @grantid_wsrep = NULL, @grantid_single = NULL, @grantid_offline = NULL;
    PREPARE grantid_s FROM 'SELECT @@GLOBAL.wsrep_on INTO @grantid_wsrep';
    IF NOT v_missing THEN
        EXECUTE grantid_s;
        DEALLOCATE PREPARE grantid_s;
    END IF;
    IF @grantid_wsrep = 1 THEN
        SET p_why = CONCAT('the server is a Galera cluster node (wsrep_on = ON): grantid needs ',
            'a single primary (each node has its own identity, and a row lock on one node ',
            'does not hold on the others); point grantid at a server with wsrep_on = OFF ',
            '(a single primary, with asynchronous replicas if you like), or use another ',
            'authority (PostgreSQL, etcd)');
    ELSE
        SET v_missing = FALSE;
        PREPARE grantid_s FROM
            'SELECT @@GLOBAL.group_replication_single_primary_mode INTO @grantid_single';
        IF NOT v_missing THEN
            EXECUTE grantid_s;
            DEALLOCATE PREPARE grantid_s;
        END IF;
        IF @grantid_single = 0 THEN
            PREPARE grantid_s FROM 'SELECT COUNT(*)
                FROM performance_schema.replication_group_members
               WHERE MEMBER_ID = @@server_uuid AND MEMBER_STATE = ''OFFLINE''
                INTO @grantid_offline';
            EXECUTE grantid_s;
            DEALLOCATE PREPARE grantid_s;
            IF NOT (@grantid_offline > 0) THEN
                SET p_why = CONCAT('the server is a member of a MySQL Group Replication group ',
                    'in multi-primary mode (group_replication_single_primary_mode = OFF): ',
                    'grantid needs a single primary (each member has its own identity, and a ',
                    'row lock on one member does not hold on the others); switch the group to ',
                    'single-primary mode (SELECT ',
                    'group_replication_switch_to_single_primary_mode()), or use another ',
                    'authority (PostgreSQL, etcd)');
            END IF;
        END IF;
    END IF;
END //

-- Starts (or extends) a quarantine until p_ms + p_lead + p_skew; each
-- namespace waits at least its own recorded lead and skew from p_ms.
DROP PROCEDURE IF EXISTS grantid_quarantine //
CREATE PROCEDURE grantid_quarantine(IN p_ms BIGINT, IN p_lead BIGINT, IN p_skew BIGINT,
                                    IN p_reason VARCHAR(512))
BEGIN
    DECLARE v_identity VARCHAR(255);
    CALL grantid_identity(v_identity);
    INSERT INTO grantid_store (id, identity, epoch, quarantine_until_ms, reason, updated_at,
                               quarantine_since_ms)
    VALUES (1, v_identity, 1, p_ms + p_lead + p_skew, p_reason, UTC_TIMESTAMP(3), p_ms)
    ON DUPLICATE KEY UPDATE epoch = epoch + 1,
        quarantine_until_ms = GREATEST(quarantine_until_ms, p_ms + p_lead + p_skew),
        quarantine_since_ms = GREATEST(quarantine_since_ms, p_ms),
        identity = v_identity, reason = p_reason, updated_at = UTC_TIMESTAMP(3);
END //

-- The operator's fence (grantid authority fence): a quarantine from now.
-- Returns one row: its end for the namespace with the longest recorded lead.
DROP PROCEDURE IF EXISTS grantid_fence //
CREATE PROCEDURE grantid_fence(IN p_now_ms BIGINT, IN p_lead BIGINT, IN p_skew BIGINT)
BEGIN
    CALL grantid_quarantine(COALESCE(p_now_ms, grantid_now_ms()), p_lead, p_skew,
                            'fenced by the operator');
    SELECT GREATEST(s.quarantine_until_ms, s.quarantine_since_ms
                    + COALESCE((SELECT MAX(n.max_lead_ms + n.clock_skew_ms)
                                  FROM grantid_namespaces n), 0))
      FROM grantid_store s WHERE s.id = 1;
END //

-- grantid authority init --new-deployment: the row without a quarantine,
-- if there is none yet. Returns one row: 1 if created, else 0.
DROP PROCEDURE IF EXISTS grantid_declare_new_deployment //
CREATE PROCEDURE grantid_declare_new_deployment()
BEGIN
    DECLARE v_identity VARCHAR(255);
    DECLARE v_created INT DEFAULT 1;
    DECLARE CONTINUE HANDLER FOR 1062 SET v_created = 0;
    CALL grantid_identity(v_identity);
    INSERT INTO grantid_store (id, identity, epoch, quarantine_until_ms, reason, updated_at)
    VALUES (1, v_identity, 1, 0, 'new deployment (operator)', UTC_TIMESTAMP(3));
    SELECT v_created;
END //

-- Locks the row of (p_namespace, p_worker) with SELECT ... FOR UPDATE and
-- reads it; a missing row is inserted (and locked) when p_create, and then
-- o_created is true. o_fencing is NULL when the row is missing and not
-- created.
DROP PROCEDURE IF EXISTS grantid_lock_worker //
CREATE PROCEDURE grantid_lock_worker(IN p_namespace VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin,
    IN p_worker BIGINT,
    IN p_create BOOLEAN, OUT o_holder BIGINT UNSIGNED, OUT o_exp BIGINT, OUT o_hw BIGINT,
    OUT o_fencing BIGINT, OUT o_created BOOLEAN)
MODIFIES SQL DATA
BEGIN
    SET o_holder = NULL, o_exp = NULL, o_hw = NULL, o_fencing = NULL, o_created = FALSE;
    SELECT holder, lease_expiry, high_water, fencing INTO o_holder, o_exp, o_hw, o_fencing
      FROM grantid_workers WHERE namespace = p_namespace AND worker = p_worker FOR UPDATE;
    IF o_fencing IS NULL AND p_create THEN
        -- A concurrent insert of the same row makes this fail on the
        -- primary key: the call errs, and the caller's retry finds the row.
        INSERT INTO grantid_workers (namespace, worker) VALUES (p_namespace, p_worker);
        SET o_exp = 0, o_hw = 0, o_fencing = 0, o_created = TRUE;
    END IF;
END //

-- The allocation rule, in one transaction. Returns one row (status, worker,
-- grant_id, start_tick, end_tick, message): status 'granted', or 'lost'
-- (someone else holds the worker, or none is free), 'refused' (can never
-- succeed as asked: another layout, a worker out of range, an unsafe
-- server setting) or 'wait' (a quarantine, a far first grant, the bounded
-- lead: retry), with the message saying why. p_worker NULL asks for any
-- free worker. p_lease_grace is in ticks. p_now_ms replaces the server's
-- clock (Unix ms): for tests and fault injection only; NULL in production.
-- The transaction is READ COMMITTED (every plain read sees the latest
-- commit; rows are locked with SELECT ... FOR UPDATE before they are read
-- for a decision), and commits durably or the call refuses to grant:
-- innodb_flush_log_at_trx_commit must be 1, and with the binary log on,
-- sync_binlog must be 1 (else an acknowledged commit can vanish in a crash
-- of the host). A multi-primary server is refused (grantid_multi_primary).
DROP PROCEDURE IF EXISTS grantid_acquire //
CREATE PROCEDURE grantid_acquire(
    IN p_namespace      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin,
    IN p_incarnation    BIGINT UNSIGNED,
    IN p_request_id     BIGINT UNSIGNED,
    IN p_worker         BIGINT,
    IN p_not_before     BIGINT,
    IN p_duration       BIGINT,
    IN p_timestamp_bits INT,
    IN p_worker_bits    INT,
    IN p_sequence_bits  INT,
    IN p_epoch_ms       BIGINT,
    IN p_tick_ms        BIGINT,
    IN p_lease_grace    BIGINT,
    IN p_max_lead_ms    BIGINT,
    IN p_clock_skew_ms  BIGINT,
    IN p_now_ms         BIGINT,
    IN p_split_bits     INT)
MODIFIES SQL DATA
BEGIN
    DECLARE v_status  VARCHAR(16) DEFAULT NULL;
    DECLARE v_message VARCHAR(1024) DEFAULT NULL;
    DECLARE v_worker, v_fence, v_start, v_end BIGINT DEFAULT NULL;
    DECLARE v_limit, v_count, v_ms, v_now, v_cand BIGINT;
    DECLARE v_identity, s_identity VARCHAR(255) DEFAULT NULL;
    DECLARE s_q, s_since BIGINT DEFAULT NULL;
    DECLARE s_reason VARCHAR(512) DEFAULT NULL;
    DECLARE v_multi VARCHAR(1024) DEFAULT NULL;
    DECLARE n_tb, n_wb, n_sb INT DEFAULT NULL;
    DECLARE n_epoch, n_tick, n_next, n_lead, n_skew BIGINT DEFAULT NULL;
    DECLARE n_split INT DEFAULT NULL;
    DECLARE w_holder BIGINT UNSIGNED DEFAULT NULL;
    DECLARE w_exp, w_hw, w_fencing BIGINT DEFAULT NULL;
    DECLARE w_created BOOLEAN DEFAULT FALSE;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;

    IF p_timestamp_bits < 1 OR p_timestamp_bits > 62 OR p_worker_bits < 0
       OR p_worker_bits > 32 OR p_tick_ms < 1 OR p_duration < 1
       OR p_split_bits IS NULL OR p_split_bits < 0 OR p_split_bits > 32 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'grantid_acquire: bad layout or duration';
    END IF;
    SET v_limit = CAST(1 AS SIGNED) << p_timestamp_bits;
    SET v_count = CAST(1 AS SIGNED) << p_worker_bits;

    body: BEGIN
        -- Durability: refuse to grant on a server that may lose a commit.
        IF @@GLOBAL.innodb_flush_log_at_trx_commit <> 1 THEN
            SET v_status = 'refused', v_message = CONCAT(
                'the server runs with innodb_flush_log_at_trx_commit = ',
                @@GLOBAL.innodb_flush_log_at_trx_commit,
                ': an acknowledged grant could vanish in a crash (set it to 1)');
            LEAVE body;
        END IF;
        IF @@GLOBAL.log_bin = 1 AND @@GLOBAL.sync_binlog <> 1 THEN
            SET v_status = 'refused', v_message = CONCAT(
                'the binary log is on with sync_binlog = ', @@GLOBAL.sync_binlog,
                ': an acknowledged grant could vanish in a crash of the host (set it to 1)');
            LEAVE body;
        END IF;
        -- One primary: a Galera node or a multi-primary group is refused.
        CALL grantid_multi_primary(v_multi);
        IF v_multi IS NOT NULL THEN
            SET v_status = 'refused', v_message = v_multi;
            LEAVE body;
        END IF;

        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;

        -- A retry gets the recorded grant.
        SELECT l.worker, l.grant_id, l.start_tick, l.end_tick
          INTO v_worker, v_fence, v_start, v_end
          FROM grantid_grant_log l
         WHERE l.namespace = p_namespace AND l.incarnation = p_incarnation
           AND l.request_id = p_request_id;
        IF v_worker IS NOT NULL THEN
            SET v_status = 'granted', v_message = 'retry';
            LEAVE body;
        END IF;

        -- The namespace, registered with its layout on first use. Handing
        -- out a new worker (p_worker NULL) is serialised per namespace by
        -- the row lock; renewals read the row without locking it.
        IF p_worker IS NULL THEN
            SELECT timestamp_bits, worker_bits, sequence_bits, epoch_ms, tick_ms, next_unused,
                   split_bits, max_lead_ms, clock_skew_ms
              INTO n_tb, n_wb, n_sb, n_epoch, n_tick, n_next, n_split, n_lead, n_skew
              FROM grantid_namespaces WHERE namespace = p_namespace FOR UPDATE;
        ELSE
            SELECT timestamp_bits, worker_bits, sequence_bits, epoch_ms, tick_ms, next_unused,
                   split_bits, max_lead_ms, clock_skew_ms
              INTO n_tb, n_wb, n_sb, n_epoch, n_tick, n_next, n_split, n_lead, n_skew
              FROM grantid_namespaces WHERE namespace = p_namespace;
        END IF;
        IF n_tb IS NULL THEN
            -- A concurrent first registration makes this insert fail on the
            -- primary key: the call errs (the caller retries) and finds it.
            INSERT INTO grantid_namespaces
                (namespace, timestamp_bits, worker_bits, sequence_bits, epoch_ms, tick_ms,
                 next_unused, split_bits, max_lead_ms, clock_skew_ms)
            VALUES (p_namespace, p_timestamp_bits, p_worker_bits, p_sequence_bits,
                    p_epoch_ms, p_tick_ms, 0, p_split_bits, p_max_lead_ms, p_clock_skew_ms);
            SET n_tb = p_timestamp_bits, n_wb = p_worker_bits, n_sb = p_sequence_bits,
                n_epoch = p_epoch_ms, n_tick = p_tick_ms, n_next = 0, n_split = p_split_bits,
                n_lead = p_max_lead_ms, n_skew = p_clock_skew_ms;
        END IF;
        IF n_tb <> p_timestamp_bits OR n_wb <> p_worker_bits OR n_sb <> p_sequence_bits
           OR n_epoch <> p_epoch_ms OR n_tick <> p_tick_ms OR n_split <> p_split_bits THEN
            SET v_status = 'refused', v_message = CONCAT('namespace ', QUOTE(p_namespace),
                ' is registered with another layout (', n_tb, '/', n_wb, '/', n_sb,
                ' bits, epoch ', n_epoch, ' ms, tick ', n_tick, ' ms, datacenter split ',
                n_split, ' bits)');
            LEAVE body;
        END IF;
        -- The longest lead and skew any caller used on the namespace, raised
        -- before this caller's grant can exist.
        IF n_lead < p_max_lead_ms OR n_skew < p_clock_skew_ms THEN
            SET n_lead = GREATEST(n_lead, p_max_lead_ms),
                n_skew = GREATEST(n_skew, p_clock_skew_ms);
            UPDATE grantid_namespaces
               SET max_lead_ms = GREATEST(max_lead_ms, n_lead),
                   clock_skew_ms = GREATEST(clock_skew_ms, n_skew)
             WHERE namespace = p_namespace;
        END IF;

        -- Authority time: the server's clock, in ticks of the layout.
        SET v_ms = COALESCE(p_now_ms, grantid_now_ms());
        SET v_now = GREATEST(v_ms - p_epoch_ms, 0) DIV p_tick_ms;

        -- State loss: nothing is granted while the database is quarantined.
        CALL grantid_identity(v_identity);
        SELECT identity, quarantine_until_ms INTO s_identity, s_q
          FROM grantid_store WHERE id = 1;
        IF s_q IS NULL THEN
            CALL grantid_quarantine(v_ms, p_max_lead_ms, p_clock_skew_ms,
                'the database had no grantid state (never used, or lost)');
        ELSEIF NOT (s_identity <=> v_identity) THEN
            CALL grantid_quarantine(v_ms, p_max_lead_ms, p_clock_skew_ms, LEFT(CONCAT(
                'the server''s identity changed from ', COALESCE(s_identity, '?'), ' to ',
                v_identity, IF(s_identity LIKE '%server_uid=%',
                    ' (once, after the upgrade to schema version 3, which no longer records '
                    'MariaDB''s server_uid; or a failover to another server)',
                    ' (a failover to another server, or a restore elsewhere)')), 512));
        END IF;
        SELECT quarantine_until_ms, reason, quarantine_since_ms INTO s_q, s_reason, s_since
          FROM grantid_store WHERE id = 1;
        IF s_since > 0 THEN
            SET s_q = GREATEST(s_q, s_since + n_lead + n_skew);
        END IF;
        IF v_ms < s_q THEN
            SET v_status = 'wait', v_message = CONCAT('quarantine: ', s_reason,
                '; no grant before Unix ms ', s_q, ' (', s_q - v_ms,
                ' ms from now), when every interval granted before it has ended');
            IF p_worker IS NOT NULL THEN
                -- A renewal: the worker's grants were made before what
                -- started the quarantine; its generator stops issuing from
                -- them and asks for a new worker, which waits it out.
                SET v_status = 'lost', v_message = CONCAT('worker ', p_worker, ': ',
                    v_message, '; the grants it holds came from before it: stop issuing ',
                    'from them and acquire again');
            END IF;
            LEAVE body;
        END IF;

        IF p_worker IS NOT NULL THEN
            IF p_worker < 0 OR p_worker >= v_count THEN
                SET v_status = 'refused', v_message = CONCAT('worker ', p_worker,
                    ' is outside the namespace''s ', v_count, ' workers');
                LEAVE body;
            END IF;
            CALL grantid_lock_worker(p_namespace, p_worker, TRUE,
                                     w_holder, w_exp, w_hw, w_fencing, w_created);
            -- The forgotten-grant check (grantid::forgotten_grant), before
            -- the holder's: the holder's grants end beyond the worker's
            -- high-water, so the database lost a grant it made (a restore its
            -- identity does not show), whoever it says holds the worker now.
            -- The quarantine lasts until they have ended too.
            IF p_not_before > w_hw
               AND p_not_before > v_now + (n_lead + n_skew + p_tick_ms - 1) DIV p_tick_ms THEN
                -- Beyond the latest end any grant of the store can have
                -- (grantid::evidence_bound): no holder could send it, and
                -- nothing starts.
                SET v_status = 'lost', v_message = CONCAT('worker ', p_worker,
                    ': a renewal from tick ', p_not_before, ' is not evidence of a lost ',
                    'grant: it is beyond any grant the store could have made (tick ',
                    v_now + (n_lead + n_skew + p_tick_ms - 1) DIV p_tick_ms, ': the ',
                    'authority''s clock plus max_lead_ms and clock_skew_ms); no quarantine ',
                    'starts, and no grant is made');
                LEAVE body;
            END IF;
            IF p_not_before > w_hw THEN
                SET v_status = 'lost', v_message = CONCAT('worker ', p_worker,
                    ': its holder holds grants until tick ', p_not_before,
                    ', beyond the store''s high-water (tick ', w_hw, '): the store forgot a ',
                    'grant it made (restored from a backup or a snapshot?); stop issuing ',
                    'from them and acquire again');
                CALL grantid_quarantine(v_ms, GREATEST(n_lead,
                    p_epoch_ms + p_not_before * p_tick_ms - v_ms), n_skew, LEFT(v_message, 512));
                LEAVE body;
            END IF;
            IF w_holder IS NOT NULL AND w_holder <> p_incarnation AND w_exp > v_now THEN
                SET v_status = 'lost', v_message = CONCAT('worker ', p_worker,
                    ' is held by incarnation ', w_holder, ' until tick ', w_exp);
                LEAVE body;
            END IF;
            SET v_worker = p_worker;
        ELSE
            -- Never-used workers first.
            WHILE v_worker IS NULL AND n_next < v_count DO
                SET v_cand = n_next, n_next = n_next + 1;
                CALL grantid_lock_worker(p_namespace, v_cand, TRUE,
                                         w_holder, w_exp, w_hw, w_fencing, w_created);
                -- A row already there was used through an explicit request.
                IF w_created THEN
                    SET v_worker = v_cand;
                END IF;
            END WHILE;
            UPDATE grantid_namespaces SET next_unused = n_next WHERE namespace = p_namespace;
            -- Then the one rule of docs/AUTHORITIES.md ("Which worker"):
            -- usable now (high-water not after the clock) first, else the
            -- nearest high-water; released before expired; the longest
            -- released or expired; the lowest number.
            IF v_worker IS NULL THEN
                SET v_cand = NULL;
                SELECT worker INTO v_cand FROM grantid_workers
                 WHERE namespace = p_namespace AND worker < v_count
                   AND (holder IS NULL OR lease_expiry <= v_now)
                 ORDER BY (high_water > v_now),
                          CASE WHEN high_water > v_now THEN high_water ELSE 0 END,
                          (holder IS NOT NULL), lease_expiry, worker
                 LIMIT 1;
                IF v_cand IS NULL THEN
                    SET v_status = 'lost', v_message = CONCAT(
                        'no free worker among the namespace''s ', v_count, ' workers');
                    LEAVE body;
                END IF;
                -- Locked, then checked again: a renewal or an explicit
                -- request may have taken it since the read above.
                CALL grantid_lock_worker(p_namespace, v_cand, FALSE,
                                         w_holder, w_exp, w_hw, w_fencing, w_created);
                IF w_holder IS NOT NULL AND w_exp > v_now THEN
                    SET v_status = 'wait', v_message = CONCAT('worker ', v_cand,
                        ' was taken while it was chosen; retry');
                    LEAVE body;
                END IF;
                -- A first grant starts at most 100 ms ahead of the clock
                -- (the generator's default max_wait): further ahead, later.
                IF w_hw > v_now + (100 + p_tick_ms - 1) DIV p_tick_ms THEN
                    SET v_status = 'wait', v_message = CONCAT(
                        'every free worker''s high-water is ahead of the clock: the nearest, ',
                        'worker ', v_cand, ', by ', w_hw - v_now,
                        ' ticks; a first grant waits for it');
                    LEAVE body;
                END IF;
                SET v_worker = v_cand;
            END IF;
        END IF;

        -- The grant: after every interval ever granted for the worker.
        SET v_start = GREATEST(w_hw, v_now, p_not_before);
        IF v_start >= v_limit THEN
            SET v_end = v_start;
        ELSEIF p_duration >= v_limit - v_start THEN
            SET v_end = v_limit;
        ELSE
            SET v_end = v_start + p_duration;
        END IF;
        IF v_start >= v_end THEN
            SET v_status = 'lost', v_message = CONCAT('worker ', v_worker,
                ' has no timestamp space left (high-water ', w_hw, ')');
            LEAVE body;
        END IF;
        -- The bounded lead: no grant ends more than max_lead after the clock.
        SET v_end = LEAST(v_end, v_now + p_max_lead_ms DIV p_tick_ms);
        IF v_start >= v_end THEN
            SET v_status = 'wait', v_message = CONCAT('worker ', v_worker, ': a grant from tick ',
                v_start, ' would end more than max_lead (', p_max_lead_ms,
                ' ms) after the clock');
            LEAVE body;
        END IF;
        SET v_fence = w_fencing + 1;
        UPDATE grantid_workers
           SET holder = p_incarnation, lease_expiry = v_end + p_lease_grace,
               high_water = v_end, fencing = v_fence, updated_at = UTC_TIMESTAMP(3)
         WHERE namespace = p_namespace AND worker = v_worker;
        INSERT INTO grantid_grant_log
            (namespace, worker, incarnation, request_id, grant_id, start_tick, end_tick,
             created_at)
        VALUES (p_namespace, v_worker, p_incarnation, p_request_id, v_fence, v_start, v_end,
                UTC_TIMESTAMP(3));
        SET v_status = 'granted';
    END body;
    COMMIT;
    IF v_status <> 'granted' THEN
        SET v_worker = NULL, v_fence = NULL, v_start = NULL, v_end = NULL;
    END IF;
    SELECT v_status AS status, v_worker AS worker, v_fence AS grant_id,
           v_start AS start_tick, v_end AS end_tick, v_message AS message;
END //

-- Ends the lease of a worker if p_incarnation holds it; the high-water
-- stays. Returns one row: 1 if it was held by p_incarnation, else 0.
DROP PROCEDURE IF EXISTS grantid_release //
CREATE PROCEDURE grantid_release(IN p_namespace VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin,
    IN p_worker BIGINT,
                                 IN p_incarnation BIGINT UNSIGNED, IN p_now_ms BIGINT)
MODIFIES SQL DATA
BEGIN
    DECLARE v_epoch, v_tick, v_now BIGINT DEFAULT NULL;
    SELECT epoch_ms, tick_ms INTO v_epoch, v_tick
      FROM grantid_namespaces WHERE namespace = p_namespace;
    IF v_tick IS NULL THEN
        SELECT 0;
    ELSE
        SET v_now = GREATEST(COALESCE(p_now_ms, grantid_now_ms()) - v_epoch, 0) DIV v_tick;
        UPDATE grantid_workers
           SET holder = NULL, lease_expiry = LEAST(lease_expiry, v_now),
               updated_at = UTC_TIMESTAMP(3)
         WHERE namespace = p_namespace AND worker = p_worker AND holder = p_incarnation;
        SELECT ROW_COUNT() > 0;
    END IF;
END //

-- Deletes grant-log rows older than p_seconds (the high-water marks live in
-- grantid_workers; only retries of requests that old lose their answer).
-- Returns one row: the number of rows deleted.
DROP PROCEDURE IF EXISTS grantid_prune_grant_log //
CREATE PROCEDURE grantid_prune_grant_log(IN p_seconds BIGINT)
MODIFIES SQL DATA
BEGIN
    DELETE FROM grantid_grant_log
     WHERE created_at < UTC_TIMESTAMP(3) - INTERVAL p_seconds SECOND;
    SELECT ROW_COUNT();
END //

DELIMITER ;

INSERT IGNORE INTO grantid_schema_version (version) VALUES (1), (2), (3), (4), (5);
