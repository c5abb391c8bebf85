//! SQL that both store backends write alike, generic over the sqlx driver: a backend's crate
//! keeps only its dialect (schema, upserts, notifications) and calls these for the rest.
//!
//! `QueryBuilder` numbers the placeholders in each driver's style (`?N` or `$N`), so a statement
//! built here runs on SQLite and on PostgreSQL unchanged.

use sqlx::{Database, Encode, QueryBuilder, Type};
use teamster_store::{SessionOrder, SessionQuery};

/// The statement that lists sessions for a [`SessionQuery`]: its filters, its order (the key,
/// then the id), its keyset cursor and its limit, selecting `columns` from `sessions`.
///
/// The cursor is a row-value comparison, which the `(key, id)` indexes serve; both backends
/// compare the key's text bytewise (PostgreSQL through the columns' `"C"` collation), as the
/// cursor's producer does.
pub fn session_listing<'q, DB>(columns: &str, query: &'q SessionQuery) -> QueryBuilder<'q, DB>
where
    DB: Database,
    &'q str: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
{
    let mut sql = QueryBuilder::<DB>::new(format!("SELECT {columns} FROM sessions WHERE 1 = 1"));
    let filters = [
        ("created_by_id", query.created_by.as_deref()),
        ("agent_name", query.agent_name.as_deref()),
        ("agent_id", query.agent_id.as_deref()),
        ("kind", query.kind.map(|kind| kind.as_str())),
        ("id", query.session_id.as_deref()),
    ];
    for (column, value) in filters {
        if let Some(value) = value {
            sql.push(format_args!(" AND {column} = ")).push_bind(value);
        }
    }
    if let Some(from) = &query.created_from {
        sql.push(" AND created_at >= ").push_bind(from.as_str());
    }
    if let Some(to) = &query.created_to {
        sql.push(" AND created_at <= ").push_bind(to.as_str());
    }
    let key = match query.order_by {
        SessionOrder::CreatedAt => "created_at",
        SessionOrder::UpdatedAt => "updated_at",
    };
    let (after, direction) = if query.descending { ("<", "DESC") } else { (">", "ASC") };
    if let Some((cursor_key, cursor_id)) = &query.after {
        sql.push(format_args!(" AND ({key}, id) {after} ("))
            .push_bind(cursor_key.as_str())
            .push(", ")
            .push_bind(cursor_id.as_str())
            .push(")");
    }
    sql.push(format_args!(" ORDER BY {key} {direction}, id {direction} LIMIT ")).push_bind(i64::from(query.limit));
    sql
}
