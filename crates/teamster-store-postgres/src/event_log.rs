//! The write path of the event log: the row sets of a batch ([`LogRows`]) go as one array
//! parameter per column, which a single statement expands with `unnest`, so a batch of any
//! size costs the same few round trips.
//!
//! A batch without turn states (the common case: the deltas of running turns) is one
//! statement in its own implicit transaction: one round trip. A batch with turn states also
//! updates turns and sessions, which other writers lock too, so it runs in a transaction that
//! first locks the sessions of its turns, as every writer does.
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

use std::sync::LazyLock;

use sqlx::PgConnection;
use sqlx::postgres::{PgArguments, Postgres};
use sqlx::query::Query;
use teamster_store::Result;
use teamster_store::codec::LogRows;

use teamster_store_sql::error;

/// Selects the turns with ids in `{turn_ids}`, joined to their sessions in session id order:
/// with a locking clause `OF sessions` appended, it locks the sessions in that order. Locking
/// re-reads a session that a concurrent transaction changed, so the turns of a session deleted
/// meanwhile drop out.
fn turns_by_session(turn_ids: &str) -> String {
    format!(
        "SELECT turns.id FROM sessions JOIN turns ON turns.session_id = sessions.id \
         WHERE turns.id IN ({turn_ids}) ORDER BY sessions.id"
    )
}

/// The row sets as common table expressions over the parameters: `$1` to `$3` the stream
/// rows, `$4` to `$7` the content rows.
const ROWS: &str = "stream_rows AS ( \
         SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[]) AS row (turn_id, sequence, data) \
     ), content_rows AS ( \
         SELECT * FROM unnest($4::text[], $5::bigint[], $6::text[], $7::text[]) AS row (turn_id, sequence, kind, data) \
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

/// Announces, from `written` (rows of `turn_id, sequence`), each turn's highest sequence
/// number on the channel `${n}`.
fn announce(channel_parameter: u8) -> String {
    format!("SELECT pg_notify(${channel_parameter}, 't:' || max(sequence) || ':' || turn_id) FROM written GROUP BY turn_id")
}

/// Applies the stream and content rows of a batch as one statement, and announces the stream
/// rows on the channel `$8`. `live` holds the turns written to, with their sessions key-share
/// locked: no session of the batch can be deleted until the statement ends, and rows for
/// turns deleted before it are skipped instead of failing their foreign key, so the rest of
/// the batch lands.
static WRITE_LOG: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {ROWS}, live AS ({} FOR KEY SHARE OF sessions), {INSERTS}, \
         written AS (SELECT turn_id, sequence FROM stream_rows) {}",
        turns_by_session(ROW_TURN_IDS),
        announce(8)
    )
});

/// Locks, for a batch with turn states, the sessions of its turns, whose `updated_at` may
/// change. `$1` is every turn id of the batch. Until commit, no session of the batch can be
/// deleted, updated or given a new turn, and no other log write can change its turns' states.
static LOCK_FOR_STATES: LazyLock<String> =
    LazyLock::new(|| format!("{} FOR NO KEY UPDATE OF sessions", turns_by_session("SELECT unnest($1::text[])")));

/// Applies a whole batch inside a transaction that holds [`LOCK_FOR_STATES`]: the stream and
/// content rows, the turn states (`$8` to `$11`, numbered by batch position), and each
/// session's `updated_at` from the last of its turns' states; then announces the stream rows
/// and states on the channel `$12`. The sessions are locked already, so `live` reads the turns
/// plainly (a locking read would skip the rows this statement updates).
static WRITE_BATCH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {ROWS}, state_rows AS ( \
             SELECT * FROM unnest($8::text[], $9::text[], $10::text[], $11::text[]) WITH ORDINALITY \
             AS row (turn_id, state, status, at, position) \
         ), live AS (SELECT id FROM turns WHERE id IN ({ROW_TURN_IDS})), {INSERTS}, changed AS ( \
             UPDATE turns SET state = row.state, status = row.status, \
             finished_at = CASE WHEN row.status = 'running' THEN NULL ELSE row.at END FROM state_rows AS row \
             WHERE turns.id = row.turn_id RETURNING turns.session_id, row.at, row.position \
         ), touched AS ( \
             UPDATE sessions SET updated_at = latest.at FROM ( \
                 SELECT DISTINCT ON (session_id) session_id, at FROM changed ORDER BY session_id, position DESC \
             ) AS latest WHERE sessions.id = latest.session_id \
         ), written AS ( \
             SELECT turn_id, sequence FROM stream_rows UNION ALL SELECT turn_id, 0::bigint FROM state_rows \
         ) {}",
        announce(12)
    )
});

/// Whether a batch has turn states, so that it needs [`write_in_transaction`] rather than
/// [`write_log`].
pub(crate) fn needs_transaction(rows: &LogRows<'_>) -> bool {
    !rows.states.is_empty()
}

/// Applies a batch without turn states, as one statement (its own transaction, unless the
/// connection is in one).
pub(crate) async fn write_log(connection: &mut PgConnection, rows: &LogRows<'_>, channel: &str) -> Result<()> {
    debug_assert!(!needs_transaction(rows), "a batch with turn states needs write_in_transaction");
    bind_log_rows(sqlx::query(&WRITE_LOG), rows).bind(channel).execute(connection).await.map_err(error::backend)?;
    Ok(())
}

/// Applies any batch on a connection inside a transaction that the caller opened and commits.
pub(crate) async fn write_in_transaction(transaction: &mut PgConnection, rows: &LogRows<'_>, channel: &str) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    if !needs_transaction(rows) {
        return write_log(transaction, rows, channel).await;
    }
    sqlx::query(&LOCK_FOR_STATES).bind(rows.turn_ids()).execute(&mut *transaction).await.map_err(error::backend)?;
    bind_log_rows(sqlx::query(&WRITE_BATCH), rows)
        .bind(rows.states.iter().map(|row| row.0).collect::<Vec<&str>>())
        .bind(rows.states.iter().map(|row| row.1.as_str()).collect::<Vec<&str>>())
        .bind(rows.states.iter().map(|row| row.2).collect::<Vec<&str>>())
        .bind(rows.states.iter().map(|row| row.3).collect::<Vec<&str>>())
        .bind(channel)
        .execute(transaction)
        .await
        .map_err(error::backend)?;
    Ok(())
}

/// Binds the stream rows as `$1` to `$3` and the content rows as `$4` to `$7`, a column each.
fn bind_log_rows<'q>(query: Query<'q, Postgres, PgArguments>, rows: &LogRows<'q>) -> Query<'q, Postgres, PgArguments> {
    query
        .bind(rows.stream.iter().map(|row| row.0).collect::<Vec<&str>>())
        .bind(rows.stream.iter().map(|row| row.1).collect::<Vec<i64>>())
        .bind(rows.stream.iter().map(|row| row.2).collect::<Vec<&str>>())
        .bind(rows.content.iter().map(|row| row.0).collect::<Vec<&str>>())
        .bind(rows.content.iter().map(|row| row.1).collect::<Vec<i64>>())
        .bind(rows.content.iter().map(|row| row.2).collect::<Vec<&str>>())
        .bind(rows.content.iter().map(|row| row.3).collect::<Vec<&str>>())
}
