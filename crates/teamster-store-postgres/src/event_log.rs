//! The write path of the event log: the row sets of a batch ([`LogRows`]) go as one array
//! parameter per column, which a single statement expands with `unnest`, so a batch of any
//! size costs the same few round trips.
//!
//! Every batch is one statement in its own implicit transaction: one round trip. A batch
//! without turn states (the common case: the deltas of running turns) only inserts rows; one
//! with turn states also updates turns and sessions, which other writers lock too, so its
//! statement first locks the sessions of its turns, as every writer does (a materialized
//! common table expression that the rest of the statement reads its turns from).
//!
//! Locks: a session's row lock guards its turns. Every writer that changes turns or their
//! logs locks the turns' sessions first, in session id order: `create_turn` (its
//! compare-and-set), `delete_session` (which then cascades to the turns), and log writes.
//! `update_session` locks its session alone. Turns are never locked ahead of their session,
//! so no two writers can wait for each other in a cycle. (`request_cancel` changes one turn
//! row without its session, but holds no other lock and waits for none while it has it.)
//!
//! Both statements end by announcing, once per turn written, the highest sequence number
//! stored (0 for a state alone) on the change feed's channel (see `feed`); the announcement
//! is delivered when the write commits.
//!
//! Fencing: a batch written under leases ([`Fence`], `EventLog::write_held`) writes only the
//! turns whose lease row its owner holds at the claim given, which the same statement checks
//! while it key-share locks those rows. A takeover changes a key column of the row (see
//! migration 0008), so it and a write in flight wait for each other: either the write commits
//! first, and the new holder reads it, or the write re-checks the row once the takeover has
//! committed and leaves the turn out. The lease rows are locked after the sessions (each with
//! its session, in session order, or after every session of a batch with states), so the
//! lock order above holds. Both statements return the ids of the turns they left out.

use std::sync::LazyLock;

use sqlx::PgConnection;
use sqlx::postgres::{PgArguments, Postgres};
use sqlx::query::QueryAs;
use teamster_store::codec::{LogRows, clamp_i64};
use teamster_store::{Result, TurnLease};

use teamster_store_sql::{error, lease_holder};

/// The leases a batch is written under: `owner` holds each of `leases`.
pub(crate) struct Fence<'a> {
    pub(crate) owner: &'a str,
    pub(crate) leases: &'a [TurnLease],
}

/// Selects the turns with ids in `{turn_ids}`, joined to their sessions in session id order:
/// with a locking clause `OF sessions` appended, it locks the sessions in that order. Locking
/// re-reads a session that a concurrent transaction changed, so the turns of a session deleted
/// meanwhile drop out.
/// When `fenced`, it keeps only the turns whose lease the batch holds, joined as `lease` (for a
/// locking clause `OF lease`).
fn turns_by_session(turn_ids: &str, fenced: bool) -> String {
    let (join, held) = fence_clauses(fenced);
    format!(
        "SELECT turns.id FROM sessions JOIN turns ON turns.session_id = sessions.id{join} \
         WHERE turns.id IN ({turn_ids}){held} ORDER BY sessions.id"
    )
}

/// The join of `turns` to the batch's leases (`held`, see [`HELD`]) and their rows (`lease`),
/// and the condition that `$8` holds each, when `fenced`; nothing otherwise.
fn fence_clauses(fenced: bool) -> (&'static str, String) {
    if !fenced {
        return ("", String::new());
    }
    (
        " JOIN held ON held.turn_id = turns.id JOIN turn_leases AS lease ON lease.turn_id = turns.id",
        format!(" AND {}", lease_holder(8, "held.claims")),
    )
}

/// The row sets as common table expressions over the parameters: `$1` to `$3` the stream
/// rows, `$4` to `$7` the content rows, `$9` and `$10` the leases of a fenced batch (`$8` is
/// their owner).
const ROWS: &str = "stream_rows AS ( \
         SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[]) AS row (turn_id, sequence, data) \
     ), content_rows AS ( \
         SELECT * FROM unnest($4::text[], $5::bigint[], $6::text[], $7::text[]) AS row (turn_id, sequence, kind, data) \
     ), held AS ( \
         SELECT * FROM unnest($9::text[], $10::bigint[]) AS held (turn_id, claims) \
     )";

/// The ids of the turns the stream and content rows write to.
const ROW_TURN_IDS: &str = "SELECT turn_id FROM stream_rows UNION SELECT turn_id FROM content_rows";

/// Stores the stream and content rows of the turns in `live`. A stream row already stored
/// stays: it is the event that was sent.
const INSERTS: &str = "streamed AS ( \
         INSERT INTO stream_events (turn_id, sequence, data) \
         SELECT row.turn_id, row.sequence, row.data FROM stream_rows AS row JOIN live ON live.id = row.turn_id \
         ON CONFLICT (turn_id, sequence) DO NOTHING \
     ), folded AS ( \
         INSERT INTO content_events (turn_id, sequence, kind, data) \
         SELECT row.turn_id, row.sequence, row.kind, row.data FROM content_rows AS row JOIN live ON live.id = row.turn_id \
         ON CONFLICT (turn_id, sequence) DO UPDATE SET kind = excluded.kind, data = excluded.data \
     )";

/// The statement's one row: the ids of the turns among `{turn_ids}` that are not in `live`
/// (left out), and the count of announcements, one per turn in `written` (rows of `turn_id,
/// sequence`) with its highest sequence number, on the channel `${n}`.
fn left_out_and_announce(turn_ids: &str, channel_parameter: u8) -> String {
    format!(
        "SELECT ARRAY(SELECT turn_id FROM ({turn_ids}) AS candidate (turn_id) EXCEPT SELECT id FROM live), \
         (SELECT count(*) FROM (SELECT pg_notify(${channel_parameter}, 't:' || max(sequence) || ':' || turn_id) \
         FROM written GROUP BY turn_id) AS announced)"
    )
}

/// Applies the stream and content rows of a batch as one statement, and announces the stream
/// rows on the channel `$11`. `live` holds the turns written to, with their sessions key-share
/// locked (and, when fenced, their lease rows): no session of the batch can be deleted until
/// the statement ends, and rows for turns deleted before it are skipped instead of failing
/// their foreign key, so the rest of the batch lands. Unfenced, then fenced.
static WRITE_LOG: LazyLock<[String; 2]> = LazyLock::new(|| {
    [false, true].map(|fenced| {
        let lock = if fenced { "FOR KEY SHARE OF sessions, lease" } else { "FOR KEY SHARE OF sessions" };
        format!(
            "WITH {ROWS}, live AS ({} {lock}), {INSERTS}, \
             written AS (SELECT row.turn_id, row.sequence FROM stream_rows AS row JOIN live ON live.id = row.turn_id) {}",
            turns_by_session(ROW_TURN_IDS, fenced),
            left_out_and_announce(ROW_TURN_IDS, 11)
        )
    })
});

/// Applies a whole batch as one statement that first locks, in session id order, the sessions
/// of its turns (`locked`, whose `updated_at` may change): until it commits, no session of the
/// batch can be deleted, updated or given a new turn, and no other log write can change its
/// turns' states. Then the stream and content rows, the turn states (`$11` to `$14`, numbered
/// by batch position), and each session's `updated_at` from the last of its turns' states;
/// then it announces the stream rows and states on the channel `$15`. Every row it writes
/// belongs to a turn read from `locked`, so its session is locked before any of it is
/// written; `live` reads those turns plainly (a locking read would skip the rows this
/// statement updates), and, when fenced, key-share locks their lease rows. Unfenced, then
/// fenced.
static WRITE_BATCH: LazyLock<[String; 2]> = LazyLock::new(|| {
    const TURN_IDS: &str = "SELECT turn_id FROM stream_rows UNION SELECT turn_id FROM content_rows \
         UNION SELECT turn_id FROM state_rows";
    [false, true].map(|fenced| {
        let (join, held) = fence_clauses(fenced);
        let lock = if fenced { "FOR KEY SHARE OF lease" } else { "" };
        format!(
            "WITH {ROWS}, state_rows AS ( \
                 SELECT * FROM unnest($11::text[], $12::text[], $13::text[], $14::text[]) WITH ORDINALITY \
                 AS row (turn_id, state, status, at, position) \
             ), locked AS MATERIALIZED ({} FOR NO KEY UPDATE OF sessions), \
             live AS (SELECT turns.id FROM turns{join} WHERE turns.id IN (SELECT id FROM locked){held} {lock}), {INSERTS}, \
             changed AS ( \
                 UPDATE turns SET state = row.state, status = row.status, \
                 finished_at = CASE WHEN row.status = 'running' THEN NULL ELSE row.at END \
                 FROM state_rows AS row JOIN live ON live.id = row.turn_id \
                 WHERE turns.id = row.turn_id RETURNING turns.session_id, row.at, row.position \
             ), touched AS ( \
                 UPDATE sessions SET updated_at = latest.at FROM ( \
                     SELECT DISTINCT ON (session_id) session_id, at FROM changed ORDER BY session_id, position DESC \
                 ) AS latest WHERE sessions.id = latest.session_id \
             ), written AS ( \
                 SELECT row.turn_id, row.sequence FROM stream_rows AS row JOIN live ON live.id = row.turn_id \
                 UNION ALL SELECT row.turn_id, 0::bigint FROM state_rows AS row JOIN live ON live.id = row.turn_id \
             ) {}",
            turns_by_session(TURN_IDS, false),
            left_out_and_announce(TURN_IDS, 15)
        )
    })
});

/// A create-turn statement (`turn`: its common table expressions, whose `created` holds the new
/// turn's id, with parameters up to `$10`) that also stores the new turn's first stream and
/// content rows (`$11` to `$13` and `$14` to `$17`, a column each, see [`bind_first_rows`])
/// and announces them on the channel `$18`, all in one statement. Rows for any other turn are
/// left out. Its one row: whether the turn was created, whether the session exists, and the
/// count of announcements.
pub(crate) fn create_turn_with_rows(turn: &str) -> String {
    format!(
        "WITH {turn}, stream_rows AS ( \
             SELECT * FROM unnest($11::text[], $12::bigint[], $13::text[]) AS row (turn_id, sequence, data) \
         ), content_rows AS ( \
             SELECT * FROM unnest($14::text[], $15::bigint[], $16::text[], $17::text[]) AS row (turn_id, sequence, kind, data) \
         ), live AS (SELECT id FROM created), {INSERTS}, \
         written AS (SELECT row.turn_id, row.sequence FROM stream_rows AS row JOIN live ON live.id = row.turn_id) \
         SELECT EXISTS (SELECT 1 FROM created), EXISTS (SELECT 1 FROM sessions WHERE id = $2), \
         (SELECT count(*) FROM (SELECT pg_notify($18, 't:' || max(sequence) || ':' || turn_id) \
         FROM written GROUP BY turn_id) AS announced), \
         (SELECT count(*) FROM (SELECT pg_notify($18, 'u:' || id) FROM swapped) AS session_announced)"
    )
}

/// Binds the stream rows as `$11` to `$13` and the content rows as `$14` to `$17` of
/// [`create_turn_with_rows`], after the turn's ten parameters.
pub(crate) fn bind_first_rows<'q, O>(
    query: QueryAs<'q, Postgres, O, PgArguments>,
    rows: &LogRows<'q>,
) -> QueryAs<'q, Postgres, O, PgArguments> {
    query
        .bind(rows.stream.iter().map(|row| row.0).collect::<Vec<&str>>())
        .bind(rows.stream.iter().map(|row| row.1).collect::<Vec<i64>>())
        .bind(rows.stream.iter().map(|row| row.2).collect::<Vec<&str>>())
        .bind(rows.content.iter().map(|row| row.0).collect::<Vec<&str>>())
        .bind(rows.content.iter().map(|row| row.1).collect::<Vec<i64>>())
        .bind(rows.content.iter().map(|row| row.2).collect::<Vec<&str>>())
        .bind(rows.content.iter().map(|row| row.3).collect::<Vec<&str>>())
}

/// Whether a batch has turn states, so that it needs [`write_batch`] rather than
/// [`write_log`].
pub(crate) fn needs_transaction(rows: &LogRows<'_>) -> bool {
    !rows.states.is_empty()
}

/// Applies a batch without turn states, as one statement (its own transaction, unless the
/// connection is in one), under `fence` if any. Returns the ids of the turns left out.
pub(crate) async fn write_log(
    connection: &mut PgConnection,
    rows: &LogRows<'_>,
    fence: Option<&Fence<'_>>,
    channel: &str,
) -> Result<Vec<String>> {
    debug_assert!(!needs_transaction(rows), "a batch with turn states needs write_batch");
    let statement = &WRITE_LOG[usize::from(fence.is_some())];
    let (left_out, _announced): (Vec<String>, i64) = bind_log_rows(sqlx::query_as(statement), rows, fence)
        .bind(channel)
        .fetch_one(connection)
        .await
        .map_err(error::backend)?;
    Ok(left_out)
}

/// Applies any batch as one statement (its own transaction, unless the connection is in one),
/// under `fence` if any. Returns the ids of the turns left out.
pub(crate) async fn write_batch(
    connection: &mut PgConnection,
    rows: &LogRows<'_>,
    fence: Option<&Fence<'_>>,
    channel: &str,
) -> Result<Vec<String>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    if !needs_transaction(rows) {
        return write_log(connection, rows, fence, channel).await;
    }
    let statement = &WRITE_BATCH[usize::from(fence.is_some())];
    let (left_out, _announced): (Vec<String>, i64) = bind_log_rows(sqlx::query_as(statement), rows, fence)
        .bind(rows.states.iter().map(|row| row.0).collect::<Vec<&str>>())
        .bind(rows.states.iter().map(|row| row.1.as_str()).collect::<Vec<&str>>())
        .bind(rows.states.iter().map(|row| row.2).collect::<Vec<&str>>())
        .bind(rows.states.iter().map(|row| row.3).collect::<Vec<&str>>())
        .bind(channel)
        .fetch_one(connection)
        .await
        .map_err(error::backend)?;
    Ok(left_out)
}

/// Binds the stream rows as `$1` to `$3`, the content rows as `$4` to `$7`, a column each, and
/// the fence as `$8` to `$10` (an empty one when there is none).
fn bind_log_rows<'q, O>(
    query: QueryAs<'q, Postgres, O, PgArguments>,
    rows: &LogRows<'q>,
    fence: Option<&Fence<'q>>,
) -> QueryAs<'q, Postgres, O, PgArguments> {
    let leases = fence.map_or(&[][..], |fence| fence.leases);
    query
        .bind(rows.stream.iter().map(|row| row.0).collect::<Vec<&str>>())
        .bind(rows.stream.iter().map(|row| row.1).collect::<Vec<i64>>())
        .bind(rows.stream.iter().map(|row| row.2).collect::<Vec<&str>>())
        .bind(rows.content.iter().map(|row| row.0).collect::<Vec<&str>>())
        .bind(rows.content.iter().map(|row| row.1).collect::<Vec<i64>>())
        .bind(rows.content.iter().map(|row| row.2).collect::<Vec<&str>>())
        .bind(rows.content.iter().map(|row| row.3).collect::<Vec<&str>>())
        .bind(fence.map_or("", |fence| fence.owner))
        .bind(leases.iter().map(|lease| lease.turn_id.as_str()).collect::<Vec<&str>>())
        .bind(leases.iter().map(|lease| clamp_i64(lease.claims)).collect::<Vec<i64>>())
}
